//! Positioned reads and writes of a file (at a byte offset, without a shared cursor) on every
//! OS the tool builds for: `std::os::unix::fs::FileExt` on Unix, `seek_read`/`seek_write`
//! (which may transfer less than asked, hence the loops) on Windows.

use std::fs::File;
use std::io;

/// Fill `buf` from `file` at byte `offset`; an end of file before `buf` is full is
/// `io::ErrorKind::UnexpectedEof`.
pub fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::FileExt;
        let (mut done, mut at) = (0, offset);
        while done < buf.len() {
            match file.seek_read(&mut buf[done..], at)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => {
                    done += n;
                    at += n as u64;
                }
            }
        }
        Ok(())
    }
}

/// Write all of `buf` to `file` at byte `offset`.
pub fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::FileExt;
        let (mut done, mut at) = (0, offset);
        while done < buf.len() {
            match file.seek_write(&buf[done..], at)? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => {
                    done += n;
                    at += n as u64;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_reads_land_at_their_offsets() {
        let f = tempfile::tempfile().unwrap();
        write_all_at(&f, b"world", 6).unwrap();
        write_all_at(&f, b"hello ", 0).unwrap();
        let mut buf = [0u8; 11];
        read_exact_at(&f, &mut buf, 0).unwrap();
        assert_eq!(&buf, b"hello world");
        let mut tail = [0u8; 3];
        read_exact_at(&f, &mut tail, 8).unwrap();
        assert_eq!(&tail, b"rld");
        let e = read_exact_at(&f, &mut [0u8; 4], 9).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}

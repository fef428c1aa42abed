//! Text inputs that must be UTF-8 (a `config.json`, a JSON Lines log): a file that is not
//! gets an error naming where its first invalid byte is (byte offset, line and column) and
//! what the file was expected to be, rather than the standard library's bare "stream did not
//! contain valid UTF-8".

use std::path::Path;

/// Where the first invalid byte of `bytes` is, in words, `bytes` starting at byte `base` of
/// its file on line `line` (1-based): `byte 0xFF at byte offset 41 (line 2, column 20)`.
/// `e` is `std::str::from_utf8(bytes)`'s error.
pub fn where_invalid(bytes: &[u8], base: u64, line: u64, e: &std::str::Utf8Error) -> String {
    let at = e.valid_up_to();
    let before = &bytes[..at];
    let lines_before = before.iter().filter(|&&b| b == b'\n').count() as u64;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    // the column counts characters, which the valid prefix holds whole
    let column = std::str::from_utf8(&before[line_start..]).map_or(0, |s| s.chars().count()) + 1;
    format!(
        "byte 0x{:02X} at byte offset {} (line {}, column {column})",
        bytes[at],
        base + at as u64,
        line + lines_before
    )
}

/// The whole file at `path` as text; a file that is not UTF-8 is an `InvalidData` error
/// saying where (see [`where_invalid`]) and that it should be `expected` (e.g. "a JSON
/// config.json").
pub fn read(path: &Path, expected: &str) -> std::io::Result<String> {
    let bytes = std::fs::read(path)?;
    String::from_utf8(bytes).map_err(|e| {
        let place = where_invalid(e.as_bytes(), 0, 1, &e.utf8_error());
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text: {place}; expected {expected} (is it a binary file?)"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_invalid_byte_is_placed_by_offset_line_and_column() {
        // line 1 "ab\n" (3 bytes), line 2 "é" (2 bytes) then 0xFF: offset 5, column 2
        let bytes = [&b"ab\n\xc3\xa9"[..], &[0xff, b'z']].concat();
        let e = std::str::from_utf8(&bytes).unwrap_err();
        assert_eq!(
            where_invalid(&bytes, 0, 1, &e),
            "byte 0xFF at byte offset 5 (line 2, column 2)"
        );
        // the same bytes as line 7 of a file, starting at its byte 100
        assert_eq!(
            where_invalid(&bytes, 100, 7, &e),
            "byte 0xFF at byte offset 105 (line 8, column 2)"
        );
    }

    #[test]
    fn a_binary_file_is_refused_with_its_place() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.json");
        std::fs::write(&p, b"{\"a\": \x00\x9f}").unwrap();
        let e = read(&p, "a JSON config.json").unwrap_err();
        assert_eq!(
            e.to_string(),
            "not UTF-8 text: byte 0x9F at byte offset 7 (line 1, column 8); expected a JSON \
             config.json (is it a binary file?)"
        );
        std::fs::write(&p, "{}").unwrap();
        assert_eq!(read(&p, "x").unwrap(), "{}");
    }
}

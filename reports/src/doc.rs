//! A small document model (headings, paragraphs, lists, tables, figures) and its two
//! renderings: Markdown (`report.md`, figures linked from `plots/`) and one self-contained HTML
//! file (`report.html`, figures inlined as SVG, CSS inline, no external reference). Building
//! the content once and rendering it twice keeps the two files saying the same thing.

use std::fmt::Write;

/// One table cell: its text and whether it is the best of its column.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    pub text: String,
    pub best: bool,
}

impl Cell {
    pub fn plain(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            best: false,
        }
    }
}

/// A block of the report.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    /// Heading of level 1..=4.
    Heading(u8, String),
    /// A paragraph; `code spans` in backticks are kept as code in both renderings.
    Para(String),
    /// A bullet list.
    List(Vec<String>),
    /// A table with a header row; best cells are marked in bold (Markdown) or highlighted (HTML).
    Table {
        header: Vec<String>,
        rows: Vec<Vec<Cell>>,
    },
    /// A plot: file name under `plots/`, its SVG text, and a caption.
    Figure {
        file: String,
        svg: String,
        caption: String,
    },
}

/// A report document.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Doc {
    pub blocks: Vec<Block>,
}

impl Doc {
    pub fn h(&mut self, level: u8, text: impl Into<String>) {
        self.blocks.push(Block::Heading(level, text.into()));
    }
    pub fn p(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Para(text.into()));
    }
    pub fn list(&mut self, items: Vec<String>) {
        if !items.is_empty() {
            self.blocks.push(Block::List(items));
        }
    }
    pub fn table(&mut self, header: Vec<String>, rows: Vec<Vec<Cell>>) {
        self.blocks.push(Block::Table { header, rows });
    }

    /// The figures, in document order.
    pub fn figures(&self) -> impl Iterator<Item = (&str, &str)> {
        self.blocks.iter().filter_map(|b| match b {
            Block::Figure { file, svg, .. } => Some((file.as_str(), svg.as_str())),
            _ => None,
        })
    }

    /// Markdown rendering; figures are linked as `plots/FILE`.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        for b in &self.blocks {
            match b {
                Block::Heading(l, t) => {
                    let _ = writeln!(s, "{} {t}\n", "#".repeat(*l as usize));
                }
                Block::Para(t) => {
                    let _ = writeln!(s, "{t}\n");
                }
                Block::List(items) => {
                    for i in items {
                        let _ = writeln!(s, "- {i}");
                    }
                    s.push('\n');
                }
                Block::Table { header, rows } => {
                    let esc = |t: &str| t.replace('|', "\\|");
                    let _ = writeln!(
                        s,
                        "| {} |",
                        header
                            .iter()
                            .map(|h| esc(h))
                            .collect::<Vec<_>>()
                            .join(" | ")
                    );
                    let _ = writeln!(s, "|{}", "---|".repeat(header.len()));
                    for r in rows {
                        let cells: Vec<String> = r
                            .iter()
                            .map(|c| {
                                if c.best && !c.text.is_empty() {
                                    format!("**{}**", esc(&c.text))
                                } else {
                                    esc(&c.text)
                                }
                            })
                            .collect();
                        let _ = writeln!(s, "| {} |", cells.join(" | "));
                    }
                    s.push('\n');
                }
                Block::Figure { file, caption, .. } => {
                    let _ = writeln!(s, "![{caption}](plots/{file})\n\n*{caption}*\n");
                }
            }
        }
        s
    }

    /// Self-contained HTML rendering with `title`; figures are inlined SVG.
    pub fn to_html(&self, title: &str) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n<main>\n",
            escape(title)
        );
        for b in &self.blocks {
            match b {
                Block::Heading(l, t) => {
                    let l = (*l).clamp(1, 4);
                    let _ = writeln!(s, "<h{l}>{}</h{l}>", inline(t));
                }
                Block::Para(t) => {
                    let _ = writeln!(s, "<p>{}</p>", inline(t));
                }
                Block::List(items) => {
                    s.push_str("<ul>\n");
                    for i in items {
                        let _ = writeln!(s, "<li>{}</li>", inline(i));
                    }
                    s.push_str("</ul>\n");
                }
                Block::Table { header, rows } => {
                    s.push_str("<div class=\"scroll\"><table>\n<thead><tr>");
                    for h in header {
                        let _ = write!(s, "<th>{}</th>", inline(h));
                    }
                    s.push_str("</tr></thead>\n<tbody>\n");
                    for r in rows {
                        s.push_str("<tr>");
                        for c in r {
                            let _ = write!(s, "<td{}>{}</td>", cell_class(c), inline(&c.text));
                        }
                        s.push_str("</tr>\n");
                    }
                    s.push_str("</tbody>\n</table></div>\n");
                }
                Block::Figure { svg, caption, .. } => {
                    let body = svg
                        .trim_start()
                        .strip_prefix("<?xml")
                        .and_then(|r| r.split_once("?>").map(|(_, b)| b))
                        .unwrap_or(svg);
                    let _ = writeln!(
                        s,
                        "<figure>\n{}\n<figcaption>{}</figcaption>\n</figure>",
                        body.trim(),
                        inline(caption)
                    );
                }
            }
        }
        s.push_str("</main>\n</body>\n</html>\n");
        s
    }
}

const CSS: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;color:#1d1d1f;background:#fff;margin:0}
main{max-width:1100px;margin:0 auto;padding:1.5rem 2rem 4rem;line-height:1.5}
h1{font-size:1.8rem;border-bottom:2px solid #d0d7de;padding-bottom:.3rem}
h2{font-size:1.35rem;margin-top:2.2rem;border-bottom:1px solid #d0d7de;padding-bottom:.2rem}
h3{font-size:1.1rem;margin-top:1.6rem}
code{background:#f3f4f6;padding:0 .25rem;border-radius:3px;font-size:.92em}
.scroll{overflow-x:auto}
table{border-collapse:collapse;margin:.6rem 0 1rem;font-size:.88rem}
th,td{border:1px solid #d0d7de;padding:.25rem .55rem;text-align:right;white-space:nowrap}
th{background:#f6f8fa;white-space:normal;vertical-align:bottom;max-width:11rem}
td:first-child,th:first-child{text-align:left}
td.best{background:#dafbe1;font-weight:600}
td.wrap{white-space:normal;min-width:14rem;text-align:left;overflow-wrap:anywhere}
figure{margin:1rem 0 1.6rem}
figure svg{max-width:100%;height:auto;border:1px solid #eaeef2}
figcaption{color:#57606a;font-size:.9rem}
";

/// Cells longer than this many characters wrap (provenance, notes); shorter ones, numbers
/// and labels, stay on one line. 40 characters at the table's font are about 20rem, the width
/// a wrapping cell keeps (`td.wrap` in [`CSS`]), so a wrapped cell is never narrower than
/// the text it would otherwise have held on one line.
const WRAP_CHARS: usize = 40;

/// The class attribute of a table cell: `best` (highlighted), `wrap` (long text), both or none.
fn cell_class(c: &Cell) -> String {
    let mut classes = Vec::new();
    if c.best && !c.text.is_empty() {
        classes.push("best");
    }
    if c.text.chars().count() > WRAP_CHARS {
        classes.push("wrap");
    }
    if classes.is_empty() {
        String::new()
    } else {
        format!(" class=\"{}\"", classes.join(" "))
    }
}

/// Escape text for HTML.
pub fn escape(t: &str) -> String {
    let mut o = String::with_capacity(t.len());
    for c in t.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            _ => o.push(c),
        }
    }
    o
}

/// Escape text and turn `code` spans and **bold** into HTML.
fn inline(t: &str) -> String {
    let mut o = String::new();
    for (i, part) in t.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(o, "<code>{}</code>", escape(part));
        } else {
            for (j, b) in part.split("**").enumerate() {
                if j % 2 == 1 {
                    let _ = write!(o, "<strong>{}</strong>", escape(b));
                } else {
                    o.push_str(&escape(b));
                }
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_code_and_bold_are_escaped() {
        assert_eq!(
            inline("a `<b>` **x&y** c"),
            "a <code>&lt;b&gt;</code> <strong>x&amp;y</strong> c"
        );
    }

    #[test]
    fn markdown_table_marks_best_and_escapes_pipes() {
        let mut d = Doc::default();
        d.table(
            vec!["a|b".into(), "v".into()],
            vec![vec![
                Cell::plain("x"),
                Cell {
                    text: "1".into(),
                    best: true,
                },
            ]],
        );
        assert_eq!(
            d.to_markdown(),
            "| a\\|b | v |\n|---|---|\n| x | **1** |\n\n"
        );
    }
}

//! Aligned text tables for the CLI: left-aligned text, right-aligned numbers.

/// A table being filled.
#[derive(Debug, Default)]
pub struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

fn numeric(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | '%' | '-' | ',' | 'k' | 'M' | 'G'))
        && s.chars().any(|c| c.is_ascii_digit())
}

impl Table {
    /// A table with these column headings.
    pub fn new(head: &[&str]) -> Self {
        Self {
            head: head.iter().map(|s| (*s).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, two spaces between columns, no trailing spaces.
    pub fn render(&self) -> String {
        let cols = self.head.len();
        let mut width = vec![0; cols];
        for row in std::iter::once(&self.head).chain(&self.rows) {
            for (i, c) in row.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for (r, row) in std::iter::once(&self.head).chain(&self.rows).enumerate() {
            let mut line = String::new();
            for (i, w) in width.iter().enumerate() {
                let cell = row.get(i).map_or("", String::as_str);
                let pad = w - cell.chars().count();
                if i > 0 {
                    line.push_str("  ");
                }
                if r > 0 && numeric(cell) {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `1234567` as `1.2M`, `12345` as `12.3k`.
pub fn human(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.1}M", n as f64 / 1e6),
        _ => format!("{:.1}G", n as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let mut t = Table::new(&["NAME", "PACKETS"]);
        t.row(vec!["www".into(), "7".into()]);
        t.row(vec!["a-long-name".into(), "12.3k".into()]);
        assert_eq!(
            t.render(),
            "NAME         PACKETS\nwww                7\na-long-name    12.3k\n"
        );
        assert_eq!(human(999), "999");
        assert_eq!(human(12_345), "12.3k");
        assert_eq!(human(2_500_000), "2.5M");
    }
}

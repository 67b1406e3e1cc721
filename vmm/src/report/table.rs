//! Hand-aligned text tables: every table the VMM prints (`vmm run`,
//! `vmm features`, `vmm bench`, `vmm snapshot info`) goes through one
//! column model, so headers and rows line up the same way everywhere and no
//! row ends in blanks.

use std::fmt::Write as _;

/// How a cell is padded to its column's width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Align {
    Left,
    Right,
}

#[derive(Clone, Debug)]
struct Column {
    /// Text written before the cell (the gap from the previous column).
    sep: &'static str,
    width: usize,
    align: Align,
}

/// The columns of one table: each with the gap before it, its width and its
/// alignment. Cells wider than their column push the rest of the row right,
/// as `format!` padding does.
#[derive(Clone, Debug, Default)]
pub struct Columns {
    cols: Vec<Column>,
}

impl Columns {
    /// A table with no columns yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a left-aligned column of `width`, preceded by `sep`.
    pub fn left(mut self, sep: &'static str, width: usize) -> Self {
        self.cols.push(Column {
            sep,
            width,
            align: Align::Left,
        });
        self
    }

    /// Appends a right-aligned column of `width`, preceded by `sep`.
    pub fn right(mut self, sep: &'static str, width: usize) -> Self {
        self.cols.push(Column {
            sep,
            width,
            align: Align::Right,
        });
        self
    }

    /// One line (newline-terminated, trailing blanks trimmed) of `cells`, one
    /// per column; missing cells are left empty, extra cells are ignored.
    pub fn line<S: AsRef<str>>(&self, cells: &[S]) -> String {
        let mut s = self.cells(cells);
        s.push('\n');
        s
    }

    /// [`Columns::line`] without the newline, for rows that go on with free
    /// text.
    pub fn cells<S: AsRef<str>>(&self, cells: &[S]) -> String {
        let mut s = String::new();
        for (i, c) in self.cols.iter().enumerate() {
            let cell = cells.get(i).map_or("", AsRef::as_ref);
            s.push_str(c.sep);
            let _ = match c.align {
                Align::Left => write!(s, "{cell:<w$}", w = c.width),
                Align::Right => write!(s, "{cell:>w$}", w = c.width),
            };
        }
        let end = s.trim_end_matches(' ').len();
        s.truncate(end);
        s
    }

    /// Appends [`Columns::line`] of `cells` to `out`.
    pub fn push<S: AsRef<str>>(&self, out: &mut String, cells: &[S]) {
        out.push_str(&self.line(cells));
    }
}

/// `-` for an absent value, else the value as text: the empty cell of every
/// table.
pub fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_and_trims() {
        let t = Columns::new().left("  ", 4).right(" ", 5).left(" ", 3);
        assert_eq!(t.line(&["id", "size", "x"]), "  id    size x\n");
        assert_eq!(t.line(&["1", "12"]), "  1       12\n");
        assert_eq!(t.line(&["toolong", "123456", "y"]), "  toolong 123456 y\n");
        assert_eq!(or_dash(None::<u32>), "-");
        assert_eq!(or_dash(Some(7)), "7");
    }
}

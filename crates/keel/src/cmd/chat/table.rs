//! A Markdown table as the terminal shows it: boxed with line-drawing characters, its
//! columns aligned as the `|:---:|` line under the header says, the header bold. Pure.

use unicode_width::UnicodeWidthStr as _;

const RESET: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";

#[derive(Debug, Clone, Copy)]
enum Align {
    Left,
    Right,
    Center,
}

/// The table of `rows` (its lines as written), each cell's text styled by `style`; `None`
/// when the rows are no table (no `|---|` line under the first).
pub fn boxed(rows: &[String], mut style: impl FnMut(&str) -> String) -> Option<String> {
    let cells: Vec<Vec<String>> = rows.iter().map(|row| cells(row)).collect();
    let is_rule = |row: &[String]| {
        !row.is_empty()
            && row.iter().all(|cell| {
                let dashes = cell.trim_matches(':');
                !dashes.is_empty() && dashes.chars().all(|c| c == '-')
            })
    };
    if cells.len() < 2 || !is_rule(&cells[1]) {
        return None;
    }
    let align: Vec<Align> = cells[1]
        .iter()
        .map(|c| match (c.starts_with(':'), c.ends_with(':')) {
            (true, true) => Align::Center,
            (false, true) => Align::Right,
            _ => Align::Left,
        })
        .collect();
    let body: Vec<&Vec<String>> = cells
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, r)| r)
        .collect();
    let columns = body
        .iter()
        .map(|r| r.len())
        .max()
        .unwrap_or(0)
        .max(align.len());
    // Each cell as styled text, and the columns it takes on screen.
    let styled: Vec<Vec<(String, usize)>> = body
        .iter()
        .map(|row| {
            (0..columns)
                .map(|i| {
                    let text = style(row.get(i).map_or("", String::as_str));
                    let width = visible(&text).width();
                    (text, width)
                })
                .collect()
        })
        .collect();
    let widths: Vec<usize> = (0..columns)
        .map(|i| styled.iter().map(|row| row[i].1).max().unwrap_or(0))
        .collect();
    let rule = |left: &str, middle: &str, right: &str| {
        let parts: Vec<String> = widths.iter().map(|w| "─".repeat(w + 2)).collect();
        format!("{DIM}{left}{}{right}{RESET}\n", parts.join(middle))
    };
    let mut out = rule("┌", "┬", "┐");
    for (index, row) in styled.iter().enumerate() {
        out.push_str(&format!("{DIM}│{RESET}"));
        for (i, (text, width)) in row.iter().enumerate() {
            let gap = widths[i] - width;
            let (left, right) = match align.get(i).copied().unwrap_or(Align::Left) {
                Align::Left => (0, gap),
                Align::Right => (gap, 0),
                Align::Center => (gap / 2, gap - gap / 2),
            };
            let text = if index == 0 {
                format!("{BOLD}{text}{RESET}")
            } else {
                text.clone()
            };
            out.push_str(&format!(
                " {}{text}{} {DIM}│{RESET}",
                " ".repeat(left),
                " ".repeat(right)
            ));
        }
        out.push('\n');
        if index == 0 {
            out.push_str(&rule("├", "┼", "┤"));
        }
    }
    out.push_str(&rule("└", "┴", "┘"));
    Some(out)
}

/// The cells of a table row: between its `|`s (the outer ones optional), trimmed; `\\|` is
/// a `|` inside a cell.
fn cells(row: &str) -> Vec<String> {
    let row = row.trim();
    let row = row.strip_prefix('|').unwrap_or(row);
    let row = row
        .strip_suffix('|')
        .filter(|r| !r.ends_with('\\'))
        .unwrap_or(row);
    let mut cells = vec![String::new()];
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                if let Some(cell) = cells.last_mut() {
                    cell.push('|');
                }
                chars.next();
            }
            '|' => cells.push(String::new()),
            _ => {
                if let Some(cell) = cells.last_mut() {
                    cell.push(c);
                }
            }
        }
    }
    cells.into_iter().map(|c| c.trim().to_owned()).collect()
}

/// Text without its ANSI escape sequences.
fn visible(styled: &str) -> String {
    let mut out = String::new();
    let mut chars = styled.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_as_the_rule_says_and_pipes_may_be_escaped() {
        let rows = [
            "| a | b | c |",
            "|:-|:-:|-:|",
            "| long cell | x | 1 |",
            "| \\| | yy | 22 |",
        ]
        .map(String::from);
        let table = boxed(&rows, str::to_owned).unwrap();
        assert_eq!(
            visible(&table),
            "┌───────────┬────┬────┐\n\
             │ a         │ b  │  c │\n\
             ├───────────┼────┼────┤\n\
             │ long cell │ x  │  1 │\n\
             │ |         │ yy │ 22 │\n\
             └───────────┴────┴────┘\n"
        );
        assert!(table.contains(&format!("{BOLD}a{RESET}")));
        assert_eq!(
            boxed(&["| a |".to_owned(), "| b |".to_owned()], str::to_owned),
            None
        );
    }
}

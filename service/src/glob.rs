//! The one pattern language of Tributary's access rules (the broker's ACL file, the
//! registry's `write_principals`): `*` stands for any run of characters, every other
//! character for itself — no `?`, no classes, nothing to escape.

/// Whether `text` matches `pattern`, where `*` stands for any run of characters (none
/// included) and every other character for itself.
pub fn matches(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // The classic two-pointer match with backtracking to the last star: linear in practice,
    // O(|p|·|t|) at worst, never exponential.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if i < p.len() && p[i] == t[j] {
            i += 1;
            j += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_runs_of_characters_and_nothing_else() {
        assert!(matches("*", ""));
        assert!(matches("a*", "a"));
        assert!(matches("a*c", "abbbc"));
        assert!(matches("*-*-*", "a-b-c"));
        assert!(!matches("a*c", "abcd"));
        assert!(!matches("a?c", "abc"), "? is a character like any other");
        assert!(matches("a?c", "a?c"));
        assert!(matches("ü*", "über"));
        assert!(!matches("", "a"));
        // Many stars against a long near-miss stays fast.
        let text = "a".repeat(5_000);
        assert!(!matches(&format!("{}b", "*a".repeat(50)), &text));
    }
}

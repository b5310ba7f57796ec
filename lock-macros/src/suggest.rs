//! "Did you mean ..?" for misspelt argument and parameter names.

/// The candidate closest to `name`, if it is close enough to be a likely typo.
pub(crate) fn closest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    // Up to one edit for short names, about one per three characters for longer ones.
    let budget = (name.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|candidate| (edit_distance(name, candidate), candidate))
        .filter(|&(distance, _)| distance <= budget)
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance over chars, with adjacent swaps counted as one edit (`tll`/`ttl`).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j]: distance between a[..i] and b[..j].
    let mut rows = vec![vec![0; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    rows[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let substitution = rows[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let mut best = substitution.min(rows[i - 1][j] + 1).min(rows[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::closest;

    const ARGS: [&str; 5] = ["key", "ttl", "wait", "locker", "crate"];

    #[test]
    fn typos_find_their_argument() {
        assert_eq!(closest("tll", ARGS), Some("ttl"));
        assert_eq!(closest("keys", ARGS), Some("key"));
        assert_eq!(closest("lock", ARGS), None);
        assert_eq!(closest("loker", ARGS), Some("locker"));
        assert_eq!(closest("timeout", ARGS), None);
        assert_eq!(closest("itme_id", ["buyer", "item_id"]), Some("item_id"));
    }
}

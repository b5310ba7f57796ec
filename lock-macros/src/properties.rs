//! Property tests of the two string parsers the attribute runs while it expands: the key
//! template (`template::scan_str`) and the `ttl`/`wait` durations (`duration`). Any input
//! gives pieces or a sentence for the user, never a panic; every error quotes what it is
//! about; well-formed input reads back exactly as written.
//!
//! They live inside the crate because a proc-macro crate exports nothing but its macros.
//! The parsers run outside a macro here: `proc_macro2` falls back to its own spans.

use proptest::prelude::*;

/// Enough cases to reach the corners of the hand-weighted generators, few enough that the
/// whole file runs in a few seconds.
fn config() -> ProptestConfig {
    ProptestConfig::with_cases(512)
}

/// Strings made of pieces that matter to the parsers, and of anything else.
fn tricky(fragments: &'static [&'static str], max_len: usize) -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => proptest::sample::select(fragments).prop_map(str::to_owned),
        1 => any::<char>().prop_map(String::from),
        1 => "[a-z0-9_]{1,6}",
    ];
    prop_oneof![
        8 => proptest::collection::vec(piece, 0..max_len).prop_map(|pieces| pieces.concat()),
        1 => any::<String>(),
        // Very long input.
        1 => proptest::collection::vec("[a-z{}0-9. ]", 1000..4000).prop_map(|chars| chars.concat()),
    ]
}

/// An error must say something, and point at the input: either quote all of it (`{text:?}`)
/// or quote, between backticks, a piece taken from it.
fn assert_quotes_input(text: &str, msg: &str, pieces: &[&str]) -> Result<(), TestCaseError> {
    prop_assert!(!msg.trim().is_empty(), "empty error for {:?}", text);
    let whole = msg.contains(&format!("{text:?}"));
    let piece = || {
        pieces
            .iter()
            .any(|piece| text.contains(piece) && msg.contains(&format!("`{piece}`")))
    };
    prop_assert!(
        whole || piece(),
        "error for {:?} quotes neither the input nor a piece of it: {}",
        text,
        msg
    );
    Ok(())
}

mod template {
    use proc_macro2::Span;
    use syn::Member;

    use super::*;
    use crate::template::{scan_str, Piece};

    const FRAGMENTS: &[&str] = &[
        "{",
        "}",
        "{{",
        "}}",
        "{}",
        ".",
        "..",
        ":",
        ":?",
        " ",
        "\t",
        "self",
        "Self",
        "r#",
        "type",
        "_",
        "a",
        "id",
        "0",
        "01",
        "4294967296",
        "ü",
        "日本",
        "🦀",
        "\u{200e}",
        "\u{a0}",
        "\u{2028}",
        "/*",
        "*/",
        "/**/",
        "//",
        "\"",
        "'",
        "\\",
        "\0",
        "\n",
        "#",
        "-",
        "$",
    ];

    fn scan(text: &str) -> Result<Vec<Piece>, String> {
        scan_str(text, Span::call_site())
    }

    /// Writes pieces back as a template: text with its braces doubled, `{path}` per field.
    fn unscan(pieces: &[Piece]) -> String {
        let mut template = String::new();
        for piece in pieces {
            match piece {
                Piece::Text(text) => template.push_str(&text.replace('{', "{{").replace('}', "}}")),
                Piece::Field(path) => {
                    template.push('{');
                    template.push_str(&path.text());
                    template.push('}');
                }
            }
        }
        template
    }

    /// Every `{..}` of the input up to the next brace: what an error may quote.
    fn placeholders_in(text: &str) -> Vec<&str> {
        let mut found = Vec::new();
        for (at, _) in text.match_indices('{') {
            if let Some(len) = text[at + 1..].find(['{', '}']) {
                found.push(&text[at..at + 1 + len + 1]);
            }
        }
        found
    }

    /// A name `syn` takes as an identifier (no keywords, no lone `_`).
    fn ident() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[a-zA-Z_][a-zA-Z0-9_]{0,8}",
            1 => proptest::sample::select(&["ü", "café", "日本", "Δx", "_ß"][..]).prop_map(str::to_owned),
            1 => proptest::sample::select(&["type", "match", "fn", "async", "loop", "ref"][..])
                .prop_map(|keyword| format!("r#{keyword}")),
        ]
        .prop_filter("not an identifier", |name| {
            syn::parse_str::<syn::Ident>(name).is_ok()
        })
    }

    /// `root.member.member` as a user would write it, `root` possibly `self`.
    fn path() -> impl Strategy<Value = String> {
        let root = prop_oneof![5 => ident(), 1 => Just("self".to_owned())];
        let member = prop_oneof![
            3 => ident(),
            1 => any::<u32>().prop_map(|index| index.to_string()),
        ];
        (root, proptest::collection::vec(member, 0..4)).prop_map(|(root, members)| {
            std::iter::once(root)
                .chain(members)
                .collect::<Vec<_>>()
                .join(".")
        })
    }

    #[derive(Debug, Clone)]
    enum Spec {
        Text(String),
        Field(String),
    }

    /// Text without braces: safe to put next to a placeholder.
    fn plain() -> impl Strategy<Value = String> {
        "[^{}]{0,8}"
    }

    proptest! {
        #![proptest_config(config())]

        /// Pieces or an error that quotes the input; accepted templates read back as written
        /// (nothing skipped, nothing normalised), with no empty or split text pieces.
        #[test]
        fn any_string_scans_or_says_why(text in tricky(FRAGMENTS, 24)) {
            match scan(&text) {
                Ok(pieces) => {
                    prop_assert!(!pieces.is_empty());
                    prop_assert_eq!(unscan(&pieces), text.as_str());
                    for pair in pieces.windows(2) {
                        prop_assert!(
                            !matches!(pair, [Piece::Text(_), Piece::Text(_)]),
                            "split text in {:?}",
                            text
                        );
                    }
                    for piece in &pieces {
                        match piece {
                            Piece::Text(part) => prop_assert!(!part.is_empty()),
                            Piece::Field(path) => {
                                let root = path.root.to_string();
                                prop_assert!(root == "self" || syn::parse_str::<syn::Ident>(&root).is_ok());
                            }
                        }
                    }
                }
                Err(msg) => {
                    if !text.is_empty() {
                        assert_quotes_input(&text, &msg, &placeholders_in(&text))?;
                    } else {
                        prop_assert!(msg.contains("key is empty"), "{}", msg);
                    }
                }
            }
        }

        /// Literal text (any characters, braces doubled) and placeholders of valid names give
        /// back exactly those pieces.
        #[test]
        fn well_formed_templates_round_trip(
            specs in proptest::collection::vec(
                prop_oneof![
                    any::<String>().prop_map(Spec::Text),
                    "[a-z:{}/ -]{1,6}".prop_map(Spec::Text),
                    path().prop_map(Spec::Field),
                ],
                1..6,
            )
        ) {
            let mut template = String::new();
            let mut expected: Vec<(bool, String)> = Vec::new();
            for spec in &specs {
                match spec {
                    Spec::Text(text) => {
                        template.push_str(&text.replace('{', "{{").replace('}', "}}"));
                        match expected.last_mut() {
                            Some((false, last)) => last.push_str(text),
                            _ if text.is_empty() => {}
                            _ => expected.push((false, text.clone())),
                        }
                    }
                    Spec::Field(path) => {
                        template.push_str(&format!("{{{path}}}"));
                        expected.push((true, path.clone()));
                    }
                }
            }
            prop_assume!(!template.is_empty());
            let pieces = scan(&template).map_err(|msg| {
                TestCaseError::fail(format!("{template:?} refused: {msg}"))
            })?;
            let got: Vec<(bool, String)> = pieces
                .iter()
                .map(|piece| match piece {
                    Piece::Text(text) => (false, text.clone()),
                    Piece::Field(path) => (true, path.text()),
                })
                .collect();
            prop_assert_eq!(got, expected);
            // Tuple indexes come out as indexes, names as names.
            for (piece, spec) in pieces.iter().filter(|piece| matches!(piece, Piece::Field(_))).zip(
                specs.iter().filter_map(|spec| match spec {
                    Spec::Field(path) => Some(path),
                    Spec::Text(_) => None,
                }),
            ) {
                let Piece::Field(path) = piece else { unreachable!() };
                for (member, written) in path.members.iter().zip(spec.split('.').skip(1)) {
                    let is_index = written.bytes().all(|b| b.is_ascii_digit());
                    prop_assert_eq!(matches!(member, Member::Unnamed(_)), is_index);
                }
            }
        }

        /// An opening brace with no closing one before the next brace is reported as unclosed.
        #[test]
        fn unclosed_brace(before in plain(), inside in plain(), after in "[^}]{0,8}") {
            let text = format!("{before}{{{inside}{after}");
            // `{{` is a literal brace, not an opening one.
            prop_assume!(!inside.is_empty() || !after.starts_with('{'));
            prop_assume!(!after.contains('}'));
            let msg = scan(&text).unwrap_err();
            prop_assert!(msg.contains("unclosed `{`"), "{:?}: {}", text, msg);
            prop_assert!(msg.contains(&format!("{text:?}")), "{}", msg);
        }

        /// A lone closing brace is reported as unmatched.
        #[test]
        fn unmatched_brace(before in plain(), after in "([^{}][^{}]{0,7})?") {
            let text = format!("{before}}}{after}");
            let msg = scan(&text).unwrap_err();
            prop_assert!(msg.contains("unmatched `}`"), "{:?}: {}", text, msg);
        }

        /// `{0}`, `{12}`: positional placeholders, said so.
        #[test]
        fn positional_placeholder(before in plain(), index in "[0-9]{1,25}") {
            let text = format!("{before}{{{index}}}");
            let msg = scan(&text).unwrap_err();
            prop_assert!(msg.contains("positional"), "{:?}: {}", text, msg);
            prop_assert!(msg.contains(&format!("`{{{index}}}`")), "{}", msg);
        }

        /// `{name:spec}`: format specs are refused, and the fix offered is a valid placeholder.
        #[test]
        fn format_spec(name in path(), spec in "[^{}]{0,6}") {
            let text = format!("{{{name}:{spec}}}");
            let msg = scan(&text).unwrap_err();
            prop_assert!(msg.contains("format specs are not supported"), "{:?}: {}", text, msg);
            let fix = format!("{{{name}}}");
            prop_assert!(msg.contains(&format!("write `{fix}`")), "{}", msg);
            prop_assert!(scan(&fix).is_ok());
        }

        /// `{ name }`: the spaces are named, and the fix offered is a valid placeholder.
        #[test]
        fn spaces_in_placeholder(name in path(), left in "[ \t]{0,2}", right in "[ \t]{0,2}") {
            prop_assume!(!left.is_empty() || !right.is_empty());
            let text = format!("{{{left}{name}{right}}}");
            let msg = scan(&text).unwrap_err();
            prop_assert!(msg.contains("remove the spaces"), "{:?}: {}", text, msg);
            let fix = format!("{{{name}}}");
            prop_assert!(msg.contains(&format!("write `{fix}`")), "{}", msg);
            prop_assert!(scan(&fix).is_ok());
        }

        /// What the Rust lexer would skip inside a name (comments, invisible marks) is
        /// refused, not dropped: `{a/**/}` is not `{a}`.
        #[test]
        fn lexer_trivia(
            path in path(),
            trivia in proptest::sample::select(&["/**/", "/* x */", "//x", "/", "\u{200e}", "\u{200f}", "a\u{2028}b"][..]),
            at in any::<proptest::sample::Index>(),
            before in any::<bool>(),
        ) {
            let mut segments: Vec<String> = path.split('.').map(str::to_owned).collect();
            let segment = &mut segments[at.index(path.split('.').count())];
            if before {
                segment.insert_str(0, trivia);
            } else {
                segment.push_str(trivia);
            }
            let inner = segments.join(".");
            let text = format!("{{{inner}}}");
            let msg = scan(&text).unwrap_err();
            prop_assert!(msg.contains("is not a placeholder"), "{:?}: {}", text, msg);
            prop_assert!(msg.contains(&format!("`{text}`")), "{}", msg);
        }

        /// A tuple index with a leading zero (`pair.01`) is not Rust: refused, not read as
        /// another index.
        #[test]
        fn leading_zero_index(root in ident(), index in any::<u32>(), zeros in 1..3usize) {
            let text = format!("{{{root}.{}{index}}}", "0".repeat(zeros));
            let msg = scan(&text).unwrap_err();
            prop_assert!(msg.contains("is not a placeholder"), "{:?}: {}", text, msg);
        }

        /// An empty path segment (`{.a}`, `{a.}`, `{a..b}`) makes the placeholder invalid,
        /// and the error says so rather than anything else.
        #[test]
        fn empty_segment(segments in proptest::collection::vec(prop_oneof![ident(), Just(String::new())], 2..5)) {
            prop_assume!(segments.iter().any(String::is_empty));
            let inner = segments.join(".");
            let text = format!("{{{inner}}}");
            let msg = scan(&text).unwrap_err();
            prop_assert!(msg.contains("is not a placeholder"), "{:?}: {}", text, msg);
            prop_assert!(msg.contains(&format!("`{text}`")), "{}", msg);
        }
    }
}

mod duration {
    use std::time::Duration;

    use super::*;
    use crate::duration::{parse, ttl, wait, MAX};

    const FRAGMENTS: &[&str] = &[
        "1",
        "0",
        "9",
        "10",
        "250",
        "007",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999",
        "h",
        "m",
        "s",
        "ms",
        "us",
        "µs",
        "ns",
        "d",
        "M",
        "S",
        "sec",
        " ",
        "  ",
        "\t",
        ".",
        "-",
        "+",
        ",",
        "_",
        "ü",
        "日",
        "\u{a0}",
        "\0",
    ];

    const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

    fn unit() -> impl Strategy<Value = (&'static str, u64)> {
        proptest::sample::select(&UNITS[..])
    }

    /// Every `` `..` `` an error may quote: runs of the input between spaces, and their
    /// digit and letter parts, and every tail.
    fn pieces_of(text: &str) -> Vec<&str> {
        let mut pieces: Vec<&str> = Vec::new();
        for (at, _) in text.char_indices() {
            pieces.push(&text[at..]);
        }
        for word in text.split(' ') {
            pieces.push(word);
            let digits = word.len() - word.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            pieces.push(&word[..digits]);
            let rest = &word[digits..];
            let letters = rest.len()
                - rest
                    .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                    .len();
            pieces.push(&rest[..letters]);
        }
        pieces.retain(|piece| !piece.is_empty());
        pieces
    }

    proptest! {
        #![proptest_config(config())]

        /// A whole number of milliseconds or an error that quotes the input; `ttl` and `wait`
        /// add exactly their ranges on top of `parse`.
        #[test]
        fn any_string_parses_or_says_why(text in tricky(FRAGMENTS, 12)) {
            let parsed = parse(&text);
            match &parsed {
                Ok(duration) => prop_assert_eq!(duration.subsec_nanos() % 1_000_000, 0),
                Err(msg) if text.trim().is_empty() => {
                    prop_assert!(msg.contains("empty duration"), "{}", msg)
                }
                Err(msg) => assert_quotes_input(&text, msg, &pieces_of(&text))?,
            }
            match (&parsed, ttl(&text)) {
                (Ok(d), Ok(t)) => prop_assert!(*d == t && !d.is_zero() && *d <= MAX),
                (Ok(d), Err(msg)) => {
                    prop_assert!(d.is_zero() || *d > MAX, "{:?} refused: {}", text, msg);
                    prop_assert!(!msg.is_empty());
                }
                (Err(p), Err(t)) => prop_assert_eq!(p, &t),
                (Err(_), Ok(_)) => prop_assert!(false, "ttl accepts {:?}", text),
            }
            match (&parsed, wait(&text)) {
                (Ok(d), Ok(w)) => prop_assert!(*d == w && *d <= MAX),
                (Ok(d), Err(msg)) => {
                    prop_assert!(*d > MAX, "{:?} refused: {}", text, msg);
                    prop_assert!(msg.contains("24h"));
                }
                (Err(p), Err(w)) => prop_assert_eq!(p, &w),
                (Err(_), Ok(_)) => prop_assert!(false, "wait accepts {:?}", text),
            }
        }

        /// `<n><unit>` for any u64 `n`: the exact duration, or "far too long" on overflow.
        #[test]
        fn one_part((name, millis) in unit(), n in prop_oneof![any::<u64>(), 0..100_000u64], zeros in 0..3usize) {
            let text = format!("{}{n}{name}", "0".repeat(zeros));
            match n.checked_mul(millis) {
                Some(total) => prop_assert_eq!(parse(&text), Ok(Duration::from_millis(total))),
                None => {
                    let msg = parse(&text).unwrap_err();
                    prop_assert!(msg.contains("far too long"), "{:?}: {}", text, msg);
                }
            }
        }

        /// Numbers past u64, with every unit: "far too long", never a wrap or a panic.
        #[test]
        fn overflowing_number((name, _) in unit(), digits in "[1-9][0-9]{20,60}") {
            let text = format!("{digits}{name}");
            let msg = parse(&text).unwrap_err();
            prop_assert!(msg.contains("far too long"), "{:?}: {}", text, msg);
        }

        /// Units largest first, each at most once, any spaces between: the sum.
        #[test]
        fn combinations(
            parts in proptest::collection::vec(proptest::option::of(0..100_000u64), 4),
            spaces in proptest::collection::vec(" {0,2}", 5),
        ) {
            prop_assume!(parts.iter().any(Option::is_some));
            let mut text = spaces[0].clone();
            let mut total = 0;
            for (i, part) in parts.iter().enumerate() {
                if let Some(n) = part {
                    text.push_str(&format!("{n}{}{}", UNITS[i].0, spaces[i + 1]));
                    total += n * UNITS[i].1;
                }
            }
            prop_assert_eq!(parse(&text), Ok(Duration::from_millis(total)));
        }

        /// A unit out of order or repeated: "largest to smallest".
        #[test]
        fn units_out_of_order(a in 0..1000u64, b in 0..1000u64, first in 0..4usize, second in 0..4usize) {
            prop_assume!(second <= first);
            let text = format!("{a}{}{b}{}", UNITS[first].0, UNITS[second].0);
            let msg = parse(&text).unwrap_err();
            prop_assert!(msg.contains("largest to smallest"), "{:?}: {}", text, msg);
        }

        /// Letters that are not a unit: named, with the units that exist.
        #[test]
        fn unknown_unit(n in 0..1000u64, word in "[a-zA-Z]{1,6}") {
            prop_assume!(!UNITS.iter().any(|(name, _)| *name == word));
            let text = format!("{n}{word}");
            let msg = parse(&text).unwrap_err();
            prop_assert!(msg.contains(&format!("unknown unit `{word}`")), "{:?}: {}", text, msg);
            prop_assert!(msg.contains("`h`, `m`, `s` and `ms`"), "{}", msg);
        }

        /// A bare number other than zero (which is zero in any unit): the missing unit is
        /// named and the fix is offered.
        #[test]
        fn missing_unit(n in 1..=u64::MAX) {
            let msg = parse(&n.to_string()).unwrap_err();
            prop_assert!(msg.contains("has no unit"), "{}", msg);
            prop_assert!(msg.contains(&format!("\"{n}s\"")), "{}", msg);
        }

        /// `1.5s`, `0.25`: fractions are named as such.
        #[test]
        fn fractions(n in 0..1000u64, frac in "[0-9]{1,3}", (name, _) in unit(), with_unit in any::<bool>()) {
            let text = format!("{n}.{frac}{}", if with_unit { name } else { "" });
            let msg = parse(&text).unwrap_err();
            prop_assert!(msg.contains("fractions are not supported"), "{:?}: {}", text, msg);
        }
    }
}

//! The layering check of `ARCHITECTURE.md`, inside the repository: lock-core's modules form
//! no import cycle, and no module imports from a layer above its own.
//!
//! The layers are read from the diagram in `ARCHITECTURE.md` itself (the top-level module
//! names on each layer's lines), so the page and the check cannot drift apart: a module
//! that the page does not place fails the test. Imports are the `crate::` paths of every
//! `.rs` file under `src/` (in `use` lines or written out, `use crate::{a, b::c}` groups
//! included), items re-exported by `lib.rs` counted in the module they come from, and
//! `super::` paths that leave a top-level module. As in `module-cycles`, a module naming its
//! own ancestor does not count toward a cycle (that is how a module shares items with its
//! files), `lib.rs` (the facade that names everything) is left out, and so are `tests.rs`
//! files of `#[cfg(test)]` modules.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, top to bottom, as `ARCHITECTURE.md` names them.
const LAYERS: [&str; 5] = ["facade", "engine", "backends", "connections", "leaves"];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// `engine::acquire` for `src/engine/acquire.rs`, `engine` for `src/engine/mod.rs`, and the
/// empty path for `src/lib.rs`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("lib" | "mod")) {
        parts.pop();
    }
    parts
}

/// The text without comments (doc comments included) and without the contents of string
/// and character literals, so that neither can name a module.
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            i += end;
        } else if let Some(body) = rest.strip_prefix("/*") {
            i += body.find("*/").map_or(rest.len(), |e| e + 4);
        } else if rest.starts_with("r#\"") || rest.starts_with("r\"") {
            let hashes = rest[1..].chars().take_while(|&c| c == '#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            let end = rest[body..]
                .find(&close)
                .map_or(rest.len(), |e| body + e + close.len());
            out.push_str("\"\"");
            i += end;
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
        } else if bytes[i] == b'\'' && rest.len() >= 3 {
            // A char literal ('x', '\n', '"'), not a lifetime ('a).
            let literal = if rest.as_bytes()[1] == b'\\' {
                rest[2..].find('\'').map(|e| e + 3)
            } else {
                let c = rest[1..].chars().next().map_or(1, char::len_utf8);
                (rest.as_bytes().get(1 + c) == Some(&b'\'')).then_some(c + 2)
            };
            match literal {
                Some(len) => {
                    out.push_str("' '");
                    i += len;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let c = rest.chars().next().expect("not at the end");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths a use tree or a written-out path names after `crate::` or `super::` at `at`:
/// `crate::a::b::C`, and every branch of `crate::{a, b::{c, d}}`.
fn expand(text: &str, at: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    let mut i = at;
    let bytes = text.as_bytes();
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < bytes.len() && bytes[i] == b'{' {
            // A group: split at top-level commas.
            let mut depth = 0;
            let mut start = i + 1;
            let mut j = i;
            while j < bytes.len() {
                match bytes[j] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            expand(text, start, path.clone(), out);
                            return;
                        }
                    }
                    b',' if depth == 1 => {
                        expand(text, start, path.clone(), out);
                        start = j + 1;
                    }
                    _ => {}
                }
                j += 1;
            }
            return;
        }
        let ident: String = text[i..].chars().take_while(|&c| is_ident(c)).collect();
        if ident.is_empty() {
            break;
        }
        i += ident.len();
        path.push(ident);
        if text[i..].starts_with("::") {
            i += 2;
        } else {
            break;
        }
    }
    if !path.is_empty() {
        out.push(path);
    }
}

/// Every module path named in `code` (comment-free) by the file of module `module`,
/// resolved from the crate root: `crate::x..`, and `super::..` relative to `module`.
fn named_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for (start, _) in code.match_indices("crate::") {
        if start > 0 && (is_ident(bytes[start - 1] as char) || bytes[start - 1] == b'$') {
            continue;
        }
        expand(code, start + "crate::".len(), Vec::new(), &mut out);
    }
    for (start, _) in code.match_indices("super::") {
        if start > 0 && (is_ident(bytes[start - 1] as char) || code[..start].ends_with("::")) {
            continue;
        }
        // Count the `super::` chain.
        let mut i = start;
        let mut ups = 0usize;
        while code[i..].starts_with("super::") {
            ups += 1;
            i += "super::".len();
        }
        // Inside an inline `mod x { .. }` (tests), the first `super`s only leave it; past
        // them, `super` of the file's module is its parent.
        let ups = ups.saturating_sub(inline_mod_depth(code, start));
        let mut base: Vec<String> = module.to_vec();
        for _ in 0..ups {
            if base.pop().is_none() {
                break;
            }
        }
        expand(code, i, base, &mut out);
    }
    out
}

/// How many inline `mod name { .. }` blocks enclose byte `at` of `code`.
fn inline_mod_depth(code: &str, at: usize) -> usize {
    let mut stack: Vec<bool> = Vec::new();
    for (i, c) in code[..at].char_indices() {
        match c {
            '{' => {
                let before = code[..i].trim_end();
                let name_len = before.chars().rev().take_while(|&c| is_ident(c)).count();
                let head = before[..before.len() - name_len].trim_end();
                let is_mod = name_len > 0
                    && head.ends_with("mod")
                    && !head[..head.len() - 3].ends_with(is_ident);
                stack.push(is_mod);
            }
            '}' => {
                stack.pop();
            }
            _ => {}
        }
    }
    stack.into_iter().filter(|&is_mod| is_mod).count()
}

/// `lib.rs`'s `pub use module::{Item, ..}`: which module each re-exported name comes from.
fn reexports(lib_code: &str) -> BTreeMap<String, Vec<String>> {
    let mut map = BTreeMap::new();
    for (start, _) in lib_code.match_indices("pub use ") {
        let mut paths = Vec::new();
        expand(lib_code, start + "pub use ".len(), Vec::new(), &mut paths);
        for path in paths {
            if let Some((item, module)) = path.split_last()
                && !module.is_empty()
            {
                map.insert(item.clone(), module.to_vec());
            }
        }
    }
    map
}

/// The layer of each top-level module, read from the diagram of `ARCHITECTURE.md`: on a
/// layer's lines, `name.rs` and `name/` name top-level modules when `src/` has them (the
/// files listed after a directory are its own).
fn layers_from_architecture(src: &Path) -> BTreeMap<String, usize> {
    let page = fs::read_to_string(crate_dir().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let diagram = page
        .split("```text")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("ARCHITECTURE.md has the layer diagram in a ```text block");
    let mut layer_of = BTreeMap::new();
    let mut current: Option<usize> = None;
    for line in diagram.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('│') {
            continue;
        }
        let mut words = trimmed.split_whitespace().peekable();
        if let Some(layer) = words
            .peek()
            .and_then(|first| LAYERS.iter().position(|l| l == first))
        {
            current = Some(layer);
            words.next();
        }
        let Some(layer) = current else { continue };
        for word in words {
            let name = word.trim_end_matches([',', ')']);
            let module = name
                .strip_suffix(".rs")
                .filter(|m| src.join(format!("{m}.rs")).is_file())
                .or_else(|| {
                    name.strip_suffix('/')
                        .filter(|m| src.join(m).join("mod.rs").is_file())
                });
            if let Some(module) = module
                && let Some(earlier) = layer_of.insert(module.to_owned(), layer)
            {
                assert_eq!(
                    earlier, layer,
                    "ARCHITECTURE.md places `{module}` in two layers"
                );
            }
        }
    }
    layer_of
}

struct Graph {
    /// Module path (`engine::acquire`) -> the modules it names.
    edges: BTreeMap<String, BTreeSet<String>>,
    /// Top-level module -> top-level modules it names, with one file that does.
    top_edges: BTreeMap<(String, String), String>,
}

fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| f.file_name().is_some_and(|n| n != "tests.rs"));
    let modules: BTreeMap<String, &PathBuf> = files
        .iter()
        .map(|f| (module_of(src, f).join("::"), f))
        .collect();
    let lib = code_only(&fs::read_to_string(src.join("lib.rs")).expect("lib.rs"));
    let reexported = reexports(&lib);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut top_edges = BTreeMap::new();
    for (name, file) in &modules {
        if name.is_empty() {
            continue; // lib.rs: the facade names everything
        }
        let module: Vec<String> = name.split("::").map(str::to_owned).collect();
        let code = code_only(&fs::read_to_string(file).expect("source file"));
        for path in named_paths(&code, &module) {
            // The longest prefix that is a module; a bare item of the root is a re-export.
            let target = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|candidate| modules.contains_key(candidate))
                .or_else(|| {
                    let first = path.first()?;
                    let mut origin = reexported.get(first)?.clone();
                    while !origin.is_empty() && !modules.contains_key(&origin.join("::")) {
                        origin.pop();
                    }
                    (!origin.is_empty()).then(|| origin.join("::"))
                });
            let Some(target) = target else { continue };
            let from_top = module[0].clone();
            let to_top = target.split("::").next().unwrap_or_default().to_owned();
            if from_top != to_top {
                top_edges
                    .entry((from_top, to_top))
                    .or_insert_with(|| format!("{} ({})", name, file.display()));
            }
            let is_ancestor = target == *name || name.starts_with(&format!("{target}::"));
            if !is_ancestor {
                edges.entry(name.clone()).or_default().insert(target);
            }
        }
    }
    Graph { edges, top_edges }
}

/// Strongly connected sets of two or more modules (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(targets) = s.edges.get(v) {
            for w in targets {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let low = s.low[v].min(s.low[w]);
                    s.low.insert(v, low);
                } else if s.on_stack.contains(w) {
                    let low = s.low[v].min(s.index[w]);
                    s.low.insert(v, low);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    let nodes: BTreeSet<&str> = edges
        .iter()
        .flat_map(|(from, to)| std::iter::once(from.as_str()).chain(to.iter().map(String::as_str)))
        .collect();
    for node in nodes {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.found
}

#[test]
fn modules_form_no_import_cycle() {
    let src = crate_dir().join("src");
    let graph = graph(&src);
    let found = cycles(&graph.edges);
    let described: Vec<String> = found
        .iter()
        .map(|cycle| {
            let inner: Vec<String> = cycle
                .iter()
                .flat_map(|a| {
                    graph.edges[a]
                        .iter()
                        .filter(|b| cycle.contains(b))
                        .map(move |b| format!("{a} -> {b}"))
                })
                .collect();
            format!("cycle of {}: {}", cycle.join(", "), inner.join("; "))
        })
        .collect();
    assert!(
        found.is_empty(),
        "import cycles in lock-core (ARCHITECTURE.md: layers point down, and modules of a \
         layer import only its lower modules):\n{}",
        described.join("\n")
    );
}

#[test]
fn no_module_imports_from_a_layer_above_it() {
    let src = crate_dir().join("src");
    let layer_of = layers_from_architecture(&src);
    let mut unplaced = Vec::new();
    for entry in fs::read_dir(&src).expect("src") {
        let path = entry.expect("entry").path();
        let module = if path.is_dir() {
            if !path.join("mod.rs").is_file() {
                continue; // src/scripts/: Lua, not a module
            }
            path.file_name().map(|n| n.to_string_lossy().into_owned())
        } else if path.extension().is_some_and(|e| e == "rs") {
            path.file_stem().map(|n| n.to_string_lossy().into_owned())
        } else {
            None
        };
        if let Some(module) = module.filter(|m| m != "lib")
            && !layer_of.contains_key(&module)
        {
            unplaced.push(module);
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules the layer diagram of ARCHITECTURE.md does not place (add each to its layer's \
         line): {unplaced:?}"
    );
    let graph = graph(&src);
    let upward: Vec<String> = graph
        .top_edges
        .iter()
        .filter_map(|((from, to), file)| {
            let (low, high) = (layer_of[from], layer_of[to]);
            (high < low).then(|| {
                format!(
                    "`{from}` ({}) imports `{to}` ({}), in {file}",
                    LAYERS[low], LAYERS[high]
                )
            })
        })
        .collect();
    assert!(
        upward.is_empty(),
        "imports from a layer above (ARCHITECTURE.md: layers point down):\n{}",
        upward.join("\n")
    );
}

/// The checker itself: it sees the kinds of paths the crate writes, and reports what it
/// should on a made-up graph.
#[test]
fn the_checker_reads_use_trees_and_finds_cycles() {
    let code = code_only(
        "use crate::{engine::{acquire, turn::Turn}, error::LockError};\n\
         // use crate::web::Nope;\n\
         /// [`crate::prims`]\n\
         let s = \"crate::builder\";\n\
         let c = '\"'; let t: &'static str = \"x\";\n\
         fn f() -> crate::key::LockKeys { super::super::token::new() }\n\
         #[cfg(test)]\n\
         mod tests {\n    use super::super::calls::Call;\n    use super::*;\n}\n",
    );
    let mut paths = named_paths(&code, &["backend".to_owned(), "scripted".to_owned()]);
    paths.sort();
    let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        joined,
        [
            "backend::calls::Call",
            "backend::scripted",
            "engine::acquire",
            "engine::turn::Turn",
            "error::LockError",
            "key::LockKeys",
            "token::new",
        ]
    );
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(cycles(&edges), [["a", "b", "c"]]);
    let lib = code_only("pub use prims::{Permit, Semaphore};\npub use error::LockError;");
    let map = reexports(&lib);
    assert_eq!(map["Semaphore"], ["prims"]);
    assert_eq!(map["LockError"], ["error"]);
}

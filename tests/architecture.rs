//! docs/architecture.md's table of imports holds for src/: every top-level
//! module of the crate has a row, and none of its code outside the tests
//! names (`crate::x`) a module its row does not allow.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layers each layer may import, from the table whose header is
/// `| layer | may import |`; `*` allows every layer.
fn table(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut rows = BTreeMap::new();
    let mut lines = doc
        .lines()
        .skip_while(|l| !l.starts_with("| layer | may import |"));
    lines.next();
    for line in lines.skip(1).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [layer, allowed, ..] = cells[..] else {
            panic!("a row of two cells at least: {line}");
        };
        let allowed = allowed
            .split(',')
            .map(|a| a.trim().trim_matches('`').to_string())
            .filter(|a| !a.is_empty() && a != "(none)")
            .collect();
        rows.insert(layer.trim_matches('`').to_string(), allowed);
    }
    rows
}

/// The text with its comments and its `#[cfg(test)]` items taken out.
fn without_tests(text: &str) -> String {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        // The item ends at its `;` or at the brace that closes its block.
        let (mut depth, mut end) = (0i32, item.len());
        for (i, c) in item.char_indices() {
            match c {
                '{' => depth += 1,
                // The end of the block around an attributed field or arm.
                '}' if depth == 0 => {
                    end = i;
                    break;
                }
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The files of the modules `text` (at `path`) declares under `#[cfg(test)]`.
fn test_modules(path: &Path, text: &str) -> Vec<PathBuf> {
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let dir = match name {
        "lib" | "mod" => path.parent().map(Path::to_path_buf),
        _ => path.parent().map(|p| p.join(name)),
    }
    .unwrap_or_default();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines
        .windows(2)
        .filter(|w| w[0] == "#[cfg(test)]")
        .filter_map(|w| w[1].strip_prefix("mod ")?.strip_suffix(';'))
        .map(|m| dir.join(format!("{m}.rs")))
        .collect()
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/ readable").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The names `crate::x` and `crate::{x, y::z}` bring in.
fn imported(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        let after = &code[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            names.extend(
                brace_items(group)
                    .iter()
                    .map(|item| ident(item.trim()))
                    .filter(|n| !n.is_empty()),
            );
        } else {
            names.insert(ident(after));
        }
    }
    names
}

/// The top-level items of `a, b::{c, d}, e}` (up to the closing brace).
fn brace_items(group: &str) -> Vec<&str> {
    let (mut items, mut depth, mut from) = (Vec::new(), 0, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[from..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    items
}

#[test]
fn every_module_imports_only_what_the_architecture_map_allows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = fs::read_to_string(root.join("docs/architecture.md")).expect("the map");
    let allowed = table(&doc);
    assert!(
        !allowed.is_empty(),
        "docs/architecture.md has no `| layer | may import |` table"
    );
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let texts: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|p| {
            let text = fs::read_to_string(&p).expect("a source file");
            (p, text)
        })
        .collect();
    let tests: BTreeSet<PathBuf> = texts.iter().flat_map(|(p, t)| test_modules(p, t)).collect();
    let layers: BTreeSet<String> = texts
        .iter()
        .filter_map(|(p, _)| layer_of(&src, p))
        .collect();
    let mut wrong = Vec::new();
    for (path, text) in &texts {
        let Some(layer) = layer_of(&src, path) else {
            continue;
        };
        let Some(may) = allowed.get(&layer) else {
            wrong.push(format!("{layer}: no row in the table"));
            continue;
        };
        if tests.contains(path) || may.contains("*") {
            continue;
        }
        for name in imported(&without_tests(text)) {
            if name != layer && layers.contains(&name) && !may.contains(&name) {
                let file = path.strip_prefix(root).unwrap_or(path).display();
                wrong.push(format!("{file}: {layer} imports {name}"));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "against docs/architecture.md:\n{}",
        wrong.join("\n")
    );
}

/// `src/x.rs` and `src/x/...` are the layer `x`; `src/lib.rs` is `lib`.
fn layer_of(src: &Path, path: &Path) -> Option<String> {
    let first = path.strip_prefix(src).ok()?.components().next()?;
    let name = first.as_os_str().to_str()?;
    Some(name.strip_suffix(".rs").unwrap_or(name).to_string())
}

#[test]
fn the_checker_sees_grouped_and_plain_imports_outside_the_tests() {
    let code = without_tests(
        "use crate::{engine::{Lock, Mode}, ffi};\nfn f() { crate::codec::x(); }\n\
         // crate::docs\n#[cfg(test)]\nmod tests {\n    use crate::waiting;\n}\n",
    );
    let names: Vec<String> = imported(&code).into_iter().collect();
    assert_eq!(names, ["codec", "engine", "ffi"]);
}

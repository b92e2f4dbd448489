//! The shape of the code, checked on every test run (issue 24), so that it cannot drift back:
//!
//! - no import circle among the files of `switch/` or `modules/src/` (a file may use the
//!   modules that contain it: a folder's `mod.rs` and its children are one concept);
//! - no function over 80 lines on the data path (the connection, its front-ends and the
//!   exchange, `http`, `relay`, `stream`, `state`, and the scheduling modules), and at most 5
//!   in all of `switch/`;
//! - no function with more than 7 parameters, and no `too_many_arguments` allowance;
//! - no file over 600 lines before its tests.
//!
//! The sources are parsed with `syn` (the parser of Rust's procedural macros) rather than
//! scanned for braces: strings, characters and comments that hold braces then count for
//! nothing. A function's length runs from its `fn` line to its closing brace, its doc comment
//! left out; code under `#[cfg(test)]` and `#[test]` functions is not checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

const MAX_LINES: usize = 80;
const MAX_PARAMETERS: usize = 7;
const MAX_FILE_LINES: usize = 600;
const MAX_LONG_OUTSIDE_DATA_PATH: usize = 5;

/// Where the data path lives: every function there stays within [`MAX_LINES`].
const DATA_PATH: &[&str] = &[
    "switch/connection",
    "switch/exchange",
    "switch/session",
    "switch/http",
    "switch/relay",
    "switch/stream.rs",
    "switch/state",
    "modules/src",
];

/// One source file of a crate.
struct Source {
    path: PathBuf,
    /// Its module path inside its crate (`["state", "control"]`; empty for the crate root).
    module: Vec<String>,
    text: String,
    syntax: syn::File,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The sources of the crate rooted at `dir` (its `lib.rs`; `main.rs` and the binary's own
/// files are a crate of their own, which the import check leaves aside).
fn sources(dir: &str) -> Vec<Source> {
    let base = root().join(dir);
    let mut files = Vec::new();
    rust_files(&base, &mut files);
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("read source");
            let syntax = syn::parse_file(&text)
                .unwrap_or_else(|e| panic!("{}: cannot parse: {e}", path.display()));
            let relative = path.strip_prefix(&base).expect("under the crate");
            let mut module: Vec<String> = relative
                .with_extension("")
                .iter()
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            Source {
                path: path
                    .strip_prefix(root())
                    .expect("in the tree")
                    .to_path_buf(),
                module,
                text,
                syntax,
            }
        })
        .collect()
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("test")
            || (attr.path().is_ident("cfg")
                && attr
                    .parse_args::<syn::Meta>()
                    .is_ok_and(|meta| meta.path().is_ident("test")))
    })
}

/// A function's size and where it is.
struct Function {
    name: String,
    line: usize,
    lines: usize,
    parameters: usize,
}

#[derive(Default)]
struct Functions(Vec<Function>);

impl Functions {
    fn record(&mut self, sig: &syn::Signature, block: &syn::Block) {
        let line = sig.fn_token.span.start().line;
        let end = block.brace_token.span.close().end().line;
        self.0.push(Function {
            name: sig.ident.to_string(),
            line,
            lines: end + 1 - line,
            parameters: sig.inputs.len(),
        });
    }
}

impl<'ast> Visit<'ast> for Functions {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !is_test_only(&item.attrs) {
            syn::visit::visit_item_mod(self, item);
        }
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if !is_test_only(&item.attrs) {
            syn::visit::visit_item_impl(self, item);
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !is_test_only(&item.attrs) {
            self.record(&item.sig, &item.block);
            syn::visit::visit_item_fn(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test_only(&item.attrs) {
            self.record(&item.sig, &item.block);
            syn::visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if let Some(block) = &item.default {
            self.record(&item.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, item);
    }
}

fn functions(source: &Source) -> Vec<Function> {
    let mut found = Functions::default();
    found.visit_file(&source.syntax);
    found.0
}

fn on_data_path(path: &Path) -> bool {
    let path = path.to_string_lossy();
    DATA_PATH.iter().any(|prefix| path.starts_with(prefix))
}

fn all_sources() -> Vec<Source> {
    let mut all = sources("switch");
    all.extend(sources("modules/src"));
    all
}

#[test]
fn functions_stay_short_and_take_few_parameters() {
    let mut problems = Vec::new();
    let mut long_elsewhere = Vec::new();
    for source in all_sources() {
        for function in functions(&source) {
            let at = format!(
                "{}:{}: `{}`",
                source.path.display(),
                function.line,
                function.name
            );
            if function.parameters > MAX_PARAMETERS {
                problems.push(format!(
                    "{at} takes {} parameters (at most {MAX_PARAMETERS})",
                    function.parameters
                ));
            }
            if function.lines > MAX_LINES {
                let what = format!("{at} is {} lines long", function.lines);
                if on_data_path(&source.path) {
                    problems.push(format!("{what} (on the data path: at most {MAX_LINES})"));
                } else {
                    long_elsewhere.push(what);
                }
            }
        }
        if source.text.contains("too_many_arguments") {
            problems.push(format!(
                "{}: allows `too_many_arguments`: carry the state in a struct",
                source.path.display()
            ));
        }
    }
    if long_elsewhere.len() > MAX_LONG_OUTSIDE_DATA_PATH {
        problems.push(format!(
            "{} functions over {MAX_LINES} lines (at most {MAX_LONG_OUTSIDE_DATA_PATH}):\n  {}",
            long_elsewhere.len(),
            long_elsewhere.join("\n  ")
        ));
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn files_stay_under_600_lines_before_their_tests() {
    let mut problems = Vec::new();
    for source in all_sources() {
        let before_tests = lines_before_tests(&source);
        if before_tests > MAX_FILE_LINES {
            problems.push(format!(
                "{}: {before_tests} lines before its tests (at most {MAX_FILE_LINES})",
                source.path.display()
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// The lines of `source` before its test module: the first `#[cfg(test)]` module written in
/// the file (`mod tests { ... }`). A `#[cfg(test)]` on anything else (a helper `mod`
/// declared elsewhere, a function, a `use`) does not end the count: counting to the first
/// such line let it hide the rest of a file.
fn lines_before_tests(source: &Source) -> usize {
    let is_cfg_test = |attr: &syn::Attribute| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == "test")
    };
    let test_module = source.syntax.items.iter().find_map(|item| match item {
        syn::Item::Mod(module) if module.content.is_some() => module
            .attrs
            .iter()
            .find(|attr| is_cfg_test(attr))
            .map(|attr| attr.pound_token.span.start().line),
        _ => None,
    });
    match test_module {
        Some(line) => line - 1,
        None => source.text.lines().count(),
    }
}

/// The modules a file names: in `use` items and in paths (`crate::state::control::apply`).
#[derive(Default)]
struct Named {
    paths: Vec<Vec<String>>,
}

impl Named {
    fn use_tree(&mut self, prefix: &[String], tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(path) => {
                let mut longer = prefix.to_vec();
                longer.push(path.ident.to_string());
                self.use_tree(&longer, &path.tree);
            }
            syn::UseTree::Name(name) => {
                let mut longer = prefix.to_vec();
                if name.ident != "self" {
                    longer.push(name.ident.to_string());
                }
                self.paths.push(longer);
            }
            syn::UseTree::Rename(rename) => {
                let mut longer = prefix.to_vec();
                longer.push(rename.ident.to_string());
                self.paths.push(longer);
            }
            syn::UseTree::Glob(_) => self.paths.push(prefix.to_vec()),
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Named {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !is_test_only(&item.attrs) {
            syn::visit::visit_item_mod(self, item);
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !is_test_only(&item.attrs) {
            syn::visit::visit_item_fn(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&[], &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.paths.push(
            path.segments
                .iter()
                .map(|segment| segment.ident.to_string())
                .collect(),
        );
        syn::visit::visit_path(self, path);
    }
}

/// The file a path leads to from `module`: the longest prefix that is a file of the crate.
fn resolve(
    module: &[String],
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let (mut base, mut rest): (Vec<String>, &[String]) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        Some("self") => (module.to_vec(), &path[1..]),
        Some("super") => (module.to_vec(), path),
        // A child module named without `self::` (2018 paths).
        Some(first) if modules.contains(&[module, &[first.to_string()]].concat()) => {
            (module.to_vec(), path)
        }
        _ => return None,
    };
    while rest.first().is_some_and(|s| s == "super") {
        base.pop();
        rest = &rest[1..];
    }
    let full: Vec<String> = base.iter().chain(rest).cloned().collect();
    (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|candidate| modules.contains(candidate))
}

/// Import edges between the files of one crate, leaving out a file's use of the modules
/// that contain it (a child reads its parent's types; the parent only declares it).
fn imports(sources: &[Source]) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let modules: BTreeSet<Vec<String>> = sources.iter().map(|s| s.module.clone()).collect();
    let mut edges = BTreeMap::new();
    for source in sources {
        let mut named = Named::default();
        named.visit_file(&source.syntax);
        let targets: BTreeSet<Vec<String>> = named
            .paths
            .iter()
            .filter_map(|path| resolve(&source.module, path, &modules))
            .filter(|target| !target.is_empty() && !source.module.starts_with(target))
            .collect();
        edges.insert(source.module.clone(), targets);
    }
    edges
}

/// The import circles (strongly connected components of more than one file), by Tarjan's
/// algorithm.
fn circles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a [String], usize>,
        low: BTreeMap<&'a [String], usize>,
        stack: Vec<&'a [String]>,
        found: Vec<Vec<Vec<String>>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a [String]) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            for next in self.edges.get(node).into_iter().flatten() {
                let next: &'a [String] = next;
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.stack.contains(&next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(member) = self.stack.pop() {
                    component.push(member.to_vec());
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node.as_slice()) {
            walk.visit(node);
        }
    }
    walk.found
}

fn describe(
    crate_dir: &str,
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    component: &[Vec<String>],
) -> String {
    let name = |module: &Vec<String>| format!("{crate_dir}::{}", module.join("::"));
    let mut lines = vec![format!(
        "import circle: {}",
        component.iter().map(name).collect::<Vec<_>>().join(", ")
    )];
    for from in component {
        for to in edges[from].iter().filter(|to| component.contains(to)) {
            lines.push(format!("  {} -> {}", name(from), name(to)));
        }
    }
    lines.join("\n")
}

#[test]
fn no_import_circles() {
    let mut problems = Vec::new();
    for crate_dir in ["switch", "modules/src"] {
        // The binary (main.rs and the files only it declares) is its own crate: it uses the
        // library from outside.
        let library: Vec<Source> = sources(crate_dir)
            .into_iter()
            .filter(|s| !(crate_dir == "switch" && is_binary_only(&s.path)))
            .collect();
        let edges = imports(&library);
        for component in circles(&edges) {
            problems.push(describe(crate_dir, &edges, &component));
        }
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

fn is_binary_only(path: &Path) -> bool {
    path == Path::new("switch/main.rs") || path.starts_with("switch/cli")
}

/// The check finds what it looks for: a circle, a long function, many parameters.
#[test]
fn the_checks_see_what_they_look_for() {
    let source = |path: &str, module: &[&str], text: &str| Source {
        path: PathBuf::from(path),
        module: module.iter().map(|s| s.to_string()).collect(),
        text: text.to_string(),
        syntax: syn::parse_file(text).expect("parse"),
    };
    let files = [
        source("switch/lib.rs", &[], "mod a; mod b;"),
        source("switch/a.rs", &["a"], "use crate::b::B; pub struct A;"),
        source("switch/b.rs", &["b"], "pub struct B(crate::a::A);"),
    ];
    let edges = imports(&files);
    assert_eq!(circles(&edges).len(), 1, "a <-> b is a circle");
    let body = "let x = \"}}}\";\n".repeat(80);
    let long = source(
        "switch/http/x.rs",
        &["http", "x"],
        &format!("/// doc\nfn f(a: u8, b: u8, c: u8, d: u8, e: u8, f: u8, g: u8, h: u8) {{\n{body}}}\n#[cfg(test)]\nmod tests {{ fn g() {{}} }}"),
    );
    let found = functions(&long);
    assert_eq!(found.len(), 1, "test code is left out");
    assert_eq!(found[0].lines, 82);
    assert_eq!(found[0].line, 2);
    assert_eq!(found[0].parameters, 8);
    assert_eq!(lines_before_tests(&long), 83, "up to the test module");
    // A `#[cfg(test)]` helper declared first does not hide what follows it.
    let items = "const X: &str = \"}\";\n".repeat(80);
    let hidden = source(
        "switch/http/y.rs",
        &["http", "y"],
        &format!("#[cfg(test)]\nmod helper;\n{items}#[cfg(test)]\nmod tests {{}}\n"),
    );
    assert_eq!(lines_before_tests(&hidden), 82);
    let untested = source("switch/http/z.rs", &["http", "z"], &items);
    assert_eq!(lines_before_tests(&untested), 80);
}

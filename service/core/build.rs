//! Embeds the sample catalog (`catalog/`) in the crate, so an installed `ctx` binary can ingest it
//! without the source tree: writes `$OUT_DIR/sample_catalog.rs`, a sorted list of
//! `(relative path, include_bytes!(absolute path))`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            files(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(&std::env::var("CARGO_MANIFEST_DIR")?).join("catalog");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut paths = Vec::new();
    files(&root, &mut paths)?;
    // Sorted as strings, the order `sample_catalog_files` documents.
    paths.sort_by(|a, b| a.as_os_str().cmp(b.as_os_str()));
    let mut code = String::from(
        "/// The sample catalog's files: path relative to the catalog directory, and content.\n\
         pub(crate) const SAMPLE_CATALOG_FILES: &[(&str, &[u8])] = &[\n",
    );
    for path in &paths {
        println!("cargo:rerun-if-changed={}", path.display());
        let relative = path
            .strip_prefix(&root)?
            .to_str()
            .ok_or("a non-UTF-8 catalog path")?;
        let absolute = path.to_str().ok_or("a non-UTF-8 catalog path")?;
        writeln!(code, "    ({relative:?}, include_bytes!({absolute:?})),")?;
    }
    code.push_str("];\n");
    let out = Path::new(&std::env::var("OUT_DIR")?).join("sample_catalog.rs");
    std::fs::write(out, code)?;
    Ok(())
}

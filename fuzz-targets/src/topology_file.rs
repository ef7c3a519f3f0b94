//! Any text as the topology file of `tributary up`: parsing and checking never panic, and a
//! topology they accept plans its processes and renders every generated config file (each
//! either its text or a typed error naming the topology's key) without a panic — ports added
//! to offsets, names and paths made from what the file says.

use std::path::Path;

use deploy::multiprocess::plan::plan;
use deploy::multiprocess::topology::Topology;

/// One input.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = Path::new("/nonexistent/tributary-fuzz/topology.toml");
    let Ok(topology) = Topology::from_text(path, text) else { return };
    let components = plan(&topology, Path::new("/nonexistent/tributary-fuzz/bin"));
    assert!(!components.is_empty(), "a deployment runs something");
    for config in components.iter().filter_map(|c| c.config.as_ref()) {
        let _ = config.content.render(path);
    }
}

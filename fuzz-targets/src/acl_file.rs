//! Any text as a broker's `acl_file`: parsing never panics, and a parsed file answers any
//! question about any principal, topic and operation.

use broker::acl::{Acl, Operation};

/// One input.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(acl) = Acl::parse(text) else { return };
    for principal in ["agent-live-a", "", "*", "operator"] {
        for operation in [Operation::Produce, Operation::Consume, Operation::Replicate] {
            let _ = acl.allows(principal, "page-view", operation);
            let _ = acl.allows(principal, text, operation);
        }
    }
}

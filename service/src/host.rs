//! The machine's host name, as audit records and event headers name it.

/// The kernel's host name, or `localhost` if it cannot be read or is empty.
pub fn name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    match host.trim() {
        "" => "localhost".to_owned(),
        host => host.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_host_name_is_never_empty() {
        let name = super::name();
        assert!(!name.is_empty() && !name.contains('\n'), "{name:?}");
    }
}

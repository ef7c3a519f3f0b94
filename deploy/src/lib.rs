//! The `tributary` launcher (in progress): `demo` runs the whole pipeline in one process;
//! `up`/`status`/`down` run it as separate processes from a topology file; `chaos` injects
//! faults into such a deployment and checks the books.

pub mod chaos;
pub mod demo;
pub mod multiprocess;

//! `trib`: Tributary at a terminal. Produces stdin lines to a topic, prints a partition's
//! messages or consumes as a member of a group, lists and creates topics, reads offsets and
//! deletes records before an offset, describes, resets and deletes consumer groups, lists brokers, deletes topics and changes
//! their settings, moves partitions and their leadership, against brokers given by address or
//! found in ZooKeeper.
//!
//! Exit codes: 0 success, 1 a failure while running (unreachable broker, broker error),
//! 2 bad arguments or a request refused as it stands (an unknown topic, a live group, an
//! unregistered broker) — each reported on one line of stderr.

mod broker_list;
mod brokers;
mod cli;
mod consume;
mod context;
mod groups;
mod offsets;
mod partitions;
mod produce;
mod progress;
mod topics;

use std::process::ExitCode;

use anyhow::Context as _;
use service::Failure;

use cli::{Cli, Command};
use context::Context;

fn main() -> ExitCode {
    let cli: Cli = service::cli::parse("trib");
    service::cli::finish("trib", start(cli))
}

fn start(cli: Cli) -> Result<(), Failure> {
    // By default only errors, since a failure is reported anyway (`RUST_LOG=warn` shows
    // retries and unreachable brokers as they happen).
    service::logging::init("error").map_err(Failure::usage)?;
    let context = Context::new(&cli.connection)?;
    let intent = cli.command.intent();
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(run(cli, &context)).map_err(|e| {
        if authorization_failed(&e) {
            // The broker says only "14"; who asked for what is known here.
            let (operation, topic) = intent.unwrap_or(("use", String::from("the cluster")));
            let principal = context.principal();
            Failure::Runtime(anyhow::anyhow!(
                "authorization failed: principal {principal} may not {operation} topic {topic}"
            ))
        } else if refused(&e) {
            Failure::usage(e)
        } else {
            e.into()
        }
    })
}

/// Whether a broker answered error 14 somewhere in `error`'s causes.
fn authorization_failed(error: &anyhow::Error) -> bool {
    use client::{ClientError, ConsumerError, ProducerError};
    let denied = |e: &ClientError| e.code() == Some(protocol::ErrorCode::AuthorizationFailed);
    error.chain().any(|cause| {
        cause.downcast_ref::<ClientError>().is_some_and(denied)
            || matches!(cause.downcast_ref::<ProducerError>(), Some(ProducerError::Send { source, .. }) if denied(source))
            || matches!(
                cause.downcast_ref::<ConsumerError>(),
                Some(ConsumerError::Request { source, .. } | ConsumerError::Connection { source }) if denied(source)
            )
    })
}

/// A request `trib` or the registry refuses as it stands (an unknown topic, a group with live
/// members, a broker that is not registered): exit code 2, like a bad argument.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

fn refused(error: &anyhow::Error) -> bool {
    use cluster::RegistryError;
    error.chain().any(|cause| {
        cause.is::<Refused>()
            || matches!(
                cause.downcast_ref::<RegistryError>(),
                Some(
                    RegistryError::GroupActive { .. }
                        | RegistryError::AdminInProgress { .. }
                        | RegistryError::InvalidAssignment { .. }
                        | RegistryError::InvalidName { .. }
                )
            )
    })
}

async fn run(cli: Cli, context: &Context) -> anyhow::Result<()> {
    let json = cli.json;
    match cli.command {
        Command::Produce(args) => produce::run(args, context, json).await,
        Command::Consume(args) => consume::run(args, context, json).await,
        Command::Topics { command } => topics::run(command, context, json).await,
        Command::Offsets(args) => offsets::run(args, context, json).await,
        Command::DeleteRecords(args) => offsets::delete_records(args, context, json).await,
        Command::Groups { command } => groups::run(command, context, json).await,
        Command::Brokers { command: cli::BrokersCommand::List { brokers } } => {
            let brokers = brokers::Brokers::find(&brokers, context).await?;
            broker_list::list(&brokers, context, json).await
        }
        Command::Partitions { command } => partitions::run(command, context, json).await,
    }
}

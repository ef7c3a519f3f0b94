//! A copier's produce (`docs/design.md`, "Copy produce"): the messages a copier read from bytes
//! `from..to` of a source partition go in with `to` as its writer's position, in one write;
//! a copy the partition has already — sent again after a lost answer, a restart, the copier's
//! own restart from an older point — is answered DUPLICATE_SEQUENCE and not appended again,
//! and one that reaches past the position has only the messages after it appended.

use std::time::Duration;

use bytes::Bytes;
use client::{ClientError, Connection, Copied};
use protocol::{Acks, ErrorCode};
use testkit::broker::{TestBroker, message_set, read_all};
use testkit::eventually;

const TOPIC: &str = "copied";

/// Sends `set` as `writer`'s copy of the source bytes from `from` (to `from + set.len()`).
async fn copy(conn: &Connection, writer: &str, from: i64, set: &Bytes) -> Result<i64, ClientError> {
    let copied = Copied { writer: writer.into(), from, to: from + set.len() as i64 };
    let answer = conn.produce_copy(TOPIC, 0, Acks::Written, &copied, set.clone()).await?;
    Ok(answer.expect("acks 1 is answered").offset)
}

fn code(result: Result<i64, ClientError>) -> Option<ErrorCode> {
    result.err().and_then(|e| e.code())
}

async fn read(broker: &TestBroker, count: usize) -> Vec<Bytes> {
    eventually(Duration::from_secs(10), "the copies visible", || async {
        let read = read_all(&broker.addr, TOPIC).await;
        (read.len() >= count).then_some(read)
    })
    .await
}

#[tokio::test]
async fn a_copy_sent_again_is_not_appended_twice_even_after_a_restart() {
    let broker = TestBroker::start().await;
    let conn = broker.connect().await;
    // The source's first three messages, then two more: back to back as its log holds them.
    let first = message_set(&["a", "b", "c"]);
    let second = message_set(&["d", "e"]);
    let source_end = (first.len() + second.len()) as i64;

    copy(&conn, "live-a/t/0", 0, &first).await.unwrap();
    assert_eq!(
        code(copy(&conn, "live-a/t/0", 0, &first).await),
        Some(ErrorCode::DuplicateSequence)
    );
    // Another writer (another source partition) is not this one.
    copy(&conn, "live-b/t/0", 0, &message_set(&["x"])).await.unwrap();
    copy(&conn, "live-a/t/0", first.len() as i64, &second).await.unwrap();
    assert_eq!(read(&broker, 6).await, ["a", "b", "c", "x", "d", "e"].map(Bytes::from));
    drop(conn);

    // The restarted broker knows the writers' positions from its log; a copier that starts
    // over from an older point has only what lies past its position appended.
    let broker = broker.restart(|_| {}).await;
    let conn = broker.connect().await;
    let whole = [first.as_ref(), second.as_ref()].concat();
    let again = code(copy(&conn, "live-a/t/0", 0, &Bytes::from(whole.clone())).await);
    assert_eq!(again, Some(ErrorCode::DuplicateSequence), "the whole source again");
    let third = message_set(&["f"]);
    let overlapping: Bytes = [second.as_ref(), third.as_ref()].concat().into();
    copy(&conn, "live-a/t/0", first.len() as i64, &overlapping).await.unwrap();
    assert_eq!(
        read(&broker, 7).await,
        ["a", "b", "c", "x", "d", "e", "f"].map(Bytes::from),
        "only the message past the position"
    );

    // Bad copies are refused whole, and change no position.
    let bad = |writer: &str, from: i64, to: i64, set: Bytes| {
        let copied = Copied { writer: writer.into(), from, to };
        let conn = &conn;
        async move { conn.produce_copy(TOPIC, 0, Acks::Written, &copied, set).await.err() }
    };
    let end = source_end + third.len() as i64;
    let next = message_set(&["g"]);
    let span = next.len() as i64;
    for (writer, from, to, why) in [
        ("", end, end + span, "an empty writer"),
        ("a b", end, end + span, "whitespace in the writer"),
        ("live-a/t/0", end, end + span + 1, "to - from is not the set's length"),
        ("live-a/t/0", -1, span - 1, "a negative from"),
    ] {
        let error = bad(writer, from, to, next.clone()).await.expect(why);
        assert_eq!(error.code(), Some(ErrorCode::InvalidRequest), "{why}");
    }
    copy(&conn, "live-a/t/0", end, &next).await.unwrap();
    assert_eq!(read(&broker, 8).await.last().unwrap(), &Bytes::from("g"));
}

//! A copier's produce (`docs/design.md`, "Copy produce"): the messages a copier read from a
//! source partition, up to byte `to`, go in with `to` as its writer's position, in one write;
//! a copy the partition has already — sent again after a lost answer, a restart, the copier's
//! own restart from an older point — is answered DUPLICATE_SEQUENCE and not appended again,
//! one that reaches past the position has only the messages after it appended, and one that
//! follows a copy the partition lacks (`from` past the position) is refused as out of order.

use std::time::Duration;

use bytes::Bytes;
use client::{ClientError, Connection, Copied};
use protocol::{Acks, ErrorCode};
use testkit::broker::{TestBroker, message_set, read_all};
use testkit::eventually;

const TOPIC: &str = "copied";

/// Sends `set` as `writer`'s copy of the source bytes up to `to`, after its copy up to `from`.
async fn copy(
    conn: &Connection,
    writer: &str,
    (from, to): (i64, i64),
    set: &Bytes,
) -> Result<i64, ClientError> {
    let copied = Copied { writer: writer.into(), from, to };
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
    let (a, b) = (first.len() as i64, (first.len() + second.len()) as i64);

    copy(&conn, "live-a/t/0", (0, a), &first).await.unwrap();
    let again = copy(&conn, "live-a/t/0", (0, a), &first).await;
    assert_eq!(code(again), Some(ErrorCode::DuplicateSequence));
    // Sent before a copy it follows (`from` past the writer's position): refused, not taken
    // past the missing one; likewise after a copy of a writer the partition has not seen.
    let early = copy(&conn, "live-a/t/0", (a + 5, b + 5), &second).await;
    assert_eq!(code(early), Some(ErrorCode::OutOfOrderSequence));
    let unseen = copy(&conn, "live-c/t/0", (a, b), &second).await;
    assert_eq!(code(unseen), Some(ErrorCode::OutOfOrderSequence));
    // Another writer (another source partition) is not this one.
    let x = message_set(&["x"]);
    copy(&conn, "live-b/t/0", (0, x.len() as i64), &x).await.unwrap();
    copy(&conn, "live-a/t/0", (a, b), &second).await.unwrap();
    assert_eq!(read(&broker, 6).await, ["a", "b", "c", "x", "d", "e"].map(Bytes::from));
    drop(conn);

    // The restarted broker knows the writers' positions from its log; a copier that starts
    // over from an older point has only what lies past its position appended.
    let broker = broker.restart(|_| {}).await;
    let conn = broker.connect().await;
    let whole = Bytes::from([first.as_ref(), second.as_ref()].concat());
    let again = code(copy(&conn, "live-a/t/0", (0, b), &whole).await);
    assert_eq!(again, Some(ErrorCode::DuplicateSequence), "the whole source again");
    let third = message_set(&["f"]);
    let c = b + third.len() as i64;
    let overlapping: Bytes = [second.as_ref(), third.as_ref()].concat().into();
    copy(&conn, "live-a/t/0", (0, c), &overlapping).await.unwrap();
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
    let next = message_set(&["g"]);
    let span = next.len() as i64;
    for (writer, from, to, why) in [
        ("", c, c + span, "an empty writer"),
        ("a b", c, c + span, "whitespace in the writer"),
        ("live-a/t/0", c, c + span - 1, "to - from shorter than the set"),
        ("live-a/t/0", -1, span - 1, "a negative from"),
    ] {
        let error = bad(writer, from, to, next.clone()).await.expect(why);
        assert_eq!(error.code(), Some(ErrorCode::InvalidRequest), "{why}");
    }
    // The source lacks bytes between the last copy and this one (deleted before they were
    // copied): the copy says where the last one ended, and goes in.
    copy(&conn, "live-a/t/0", (c, c + 100 + span), &next).await.unwrap();
    assert_eq!(read(&broker, 8).await.last().unwrap(), &Bytes::from("g"));
}

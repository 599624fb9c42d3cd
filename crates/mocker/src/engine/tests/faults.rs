//! Scripted faults.

use std::time::Duration;

use futures::StreamExt;
use genfront_protocol::{Engine, EngineOutput, ErrorKind, FinishReason};
use tokio_util::sync::CancellationToken;

use super::{Item, check, collect, engine, engine_with, outputs, prompt, request, single_error};
use crate::ScriptedFault;

fn fault(text: &str) -> ScriptedFault {
    text.parse().expect("valid fault")
}

fn oks(items: &[Item]) -> Vec<EngineOutput> {
    items
        .iter()
        .filter_map(|i| i.as_ref().ok().cloned())
        .collect()
}

#[tokio::test]
async fn error_before_the_first_token_hits_only_request_k() {
    let e = engine_with(|c| c.faults = vec![fault("error@2:overloaded:busy")]);
    let mut req = request(&prompt(5), 2);
    req.stop.ignore_eos = true;
    assert_eq!(outputs(&e, req.clone()).await.len(), 2);
    let err = single_error(&e, req.clone()).await;
    assert_eq!(
        (err.kind, err.message.as_str()),
        (ErrorKind::Overloaded, "busy")
    );
    assert_eq!(outputs(&e, req).await.len(), 2);
    assert_eq!((e.rejected(), e.started(), e.completed()), (1, 2, 2));
}

#[tokio::test]
async fn fail_after_yields_tokens_then_an_error() {
    let e = engine();
    e.add_fault(fault("fail-after@1:2"));
    let mut req = request(&prompt(5), 10);
    req.sampling.n = 2;
    req.stop.ignore_eos = true;
    let items = collect(&e, req).await;
    assert_eq!(items.len(), 5, "2 steps x 2 choices, then the error");
    assert!(
        items[..4]
            .iter()
            .all(|i| i.as_ref().is_ok_and(|o| o.token_ids.len() == 1))
    );
    let err = items[4].as_ref().expect_err("the last item is the error");
    assert_eq!(err.kind, ErrorKind::Internal);
    assert_eq!((e.failed(), e.running(), e.aborted()), (1, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn stall_holds_until_cancelled() {
    let e = engine_with(|c| c.faults = vec![fault("stall@1:3")]);
    let mut req = request(&prompt(5), 10);
    req.stop.ignore_eos = true;
    let cancel = CancellationToken::new();
    let mut stream = e.generate(req.clone(), cancel.clone());
    let mut items = Vec::new();
    for _ in 0..3 {
        items.push(stream.next().await.expect("open").expect("ok"));
    }
    let waited = tokio::time::timeout(Duration::from_secs(3600), stream.next()).await;
    assert!(waited.is_err(), "stalled for an hour");
    assert_eq!(e.running(), 1);
    cancel.cancel();
    let last = stream.next().await.expect("open").expect("ok");
    assert_eq!(
        last.finish_reason,
        Some(FinishReason::Cancelled {
            message: "Aborted".to_owned()
        })
    );
    items.push(last);
    check(&e, &req, &items);
    assert!(stream.next().await.is_none());
    assert_eq!((e.aborted(), e.running()), (1, 0));

    // A stalled stream that is dropped is aborted too.
    e.add_fault(fault("stall@2:0"));
    let mut stream = e.generate(req, CancellationToken::new());
    assert!(
        tokio::time::timeout(Duration::from_secs(60), stream.next())
            .await
            .is_err()
    );
    drop(stream);
    assert_eq!((e.aborted(), e.running()), (2, 0));
}

#[tokio::test]
async fn finish_error_ends_every_choice() {
    let e = engine_with(|c| c.faults = vec![fault("finish-error@*:1:device lost")]);
    let mut req = request(&prompt(5), 10);
    req.sampling.n = 2;
    req.stop.ignore_eos = true;
    for _ in 0..2 {
        let items = outputs(&e, req.clone()).await;
        check(&e, &req, &items);
        assert_eq!(items.len(), 4);
        for o in &items[2..] {
            assert!(o.token_ids.is_empty());
            assert_eq!(
                o.finish_reason,
                Some(FinishReason::Error {
                    message: "device lost".to_owned()
                })
            );
        }
    }
    assert_eq!((e.failed(), e.running()), (2, 0));
}

#[tokio::test]
async fn faults_can_be_added_and_cleared_at_runtime() {
    let e = engine();
    let mut req = request(&prompt(5), 3);
    req.stop.ignore_eos = true;
    e.add_fault(fault("error@*:unavailable"));
    assert_eq!(e.faults().len(), 1);
    assert_eq!(
        single_error(&e, req.clone()).await.kind,
        ErrorKind::Unavailable
    );
    e.clear_faults();
    assert!(e.faults().is_empty());
    assert_eq!(oks(&collect(&e, req.clone()).await).len(), 3);
    // A fault past the end of the generation never fires.
    e.add_fault(fault("fail-after@3:10"));
    let items = collect(&e, req).await;
    assert!(items.iter().all(Result::is_ok));
    assert_eq!((e.failed(), e.completed()), (0, 2));
}

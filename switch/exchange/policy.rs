//! Policy: what the matched rule does before a server is picked (policy/ holds the rules'
//! actions, config/policy.rs reads them). A redirect or a `respond` answers here; a rate limit
//! counts the request by its key and may refuse it (policy/rate_limit/ `request_key.rs` and
//! `refusal.rs`: this file only sends the refusal); a path edit writes the path the server
//! gets. What goes on to the pool is the rule's [`Edits`], which the head writers apply on
//! both sides.

use super::account::Outcome;
use super::client::ClientSide;
use super::{Buffers, Context};
use crate::http::fields::FieldRole;
use crate::http::grpc::GrpcAnswer;
use crate::http::status::{Answer, Given};
use crate::policy::rate_limit::{Decision, Limiter, Refusal};
use crate::policy::redirect::{Origin, Redirect};
use crate::policy::respond::Respond;
use crate::policy::{Action, Edits};
use crate::rules::Matched;
use crate::state::stats;
use std::time::Duration;

/// What the rule leaves to the exchange.
pub(super) enum Step<'a> {
    /// On to the pool, with the rule's edits (the new path, if any, is in the buffers).
    Pool {
        pool: usize,
        edits: Option<&'a Edits>,
        /// A dry-run limit would have refused the request (named in the access log).
        would_limit: Option<usize>,
    },
    /// Answered by the switch.
    Answered(Outcome),
}

/// Applies the rule `matched` to the request `client` holds; `normal` is its path in normal
/// form when that differs (the path the rules saw, http/path.rs).
pub(super) async fn apply<'a, C: ClientSide>(
    cx: &Context<'a>,
    matched: Matched<'a>,
    normal: Option<&[u8]>,
    client: &mut C,
    work: &mut Buffers,
) -> Step<'a> {
    let (pool, edits) = match matched.action {
        Action::Pool { pool, edits } => (*pool, edits.as_deref()),
        Action::Redirect(redirect) => {
            let answered = answer_redirect(cx, matched, normal, redirect, client, work).await;
            return Step::Answered(answered);
        }
        Action::Respond(respond) => {
            return Step::Answered(answer_respond(cx, respond, client, work).await)
        }
    };
    let Some(edits) = edits else {
        return Step::Pool {
            pool,
            edits: None,
            would_limit: None,
        };
    };
    let mut would_limit = None;
    if let Some(index) = edits.limit {
        let limiter = &cx.generation.limits[index];
        match limiter.check_request(client.request(), normal, cx.peer.ip()) {
            Decision::Allowed => {}
            Decision::WouldLimit { .. } => would_limit = Some(index),
            Decision::Limited { retry_after } => {
                let mut outcome = refuse(cx, limiter, retry_after, client, work).await;
                outcome.pool = Some(pool);
                outcome.limited = Some(index);
                return Step::Answered(outcome);
            }
        }
    }
    if let Some(path_edit) = &edits.path {
        let (head, buf) = client.request();
        let path = normal.unwrap_or(head.path.get(buf));
        let captures = match (path_edit.uses_groups(), matched.path) {
            (true, Some(regex)) => regex.captures(path),
            _ => None,
        };
        path_edit.apply(path, captures.as_ref(), &mut work.policy_bytes);
    }
    Step::Pool {
        pool,
        edits: Some(edits),
        would_limit,
    }
}

/// Sends what the rule says, as the service gives its answers (policy/own_answers.rs: its
/// `response_headers`).
async fn answer_own<C: ClientSide>(
    cx: &Context<'_>,
    client: &mut C,
    out: &mut Vec<u8>,
    answer: Given<'_>,
) -> (u64, bool) {
    let (mut text, mut fields) = (Vec::new(), Vec::new());
    let own = &cx.service.own_answers;
    let answer = own.dress(&Answer::Given(answer), &mut text, &mut fields);
    client.answer(out, &answer).await
}

/// Sends `limiter`'s refusal of a request that would pass after `retry_after`.
async fn refuse<C: ClientSide>(
    cx: &Context<'_>,
    limiter: &Limiter,
    retry_after: Duration,
    client: &mut C,
    work: &mut Buffers,
) -> Outcome {
    let refusal = Refusal::new(limiter, retry_after);
    refusal.write_body(&mut work.policy_bytes);
    let fields = refusal.fields();
    let answer = Given {
        status: refusal.status,
        fields: &fields,
        body: &work.policy_bytes,
    };
    client.release_head();
    // A gRPC call hears RESOURCE_EXHAUSTED, the gRPC way (http/grpc.rs).
    let grpc = client
        .grpc()
        .then(|| GrpcAnswer::new(refusal.status, "rate limited"));
    let mut grpc_fields = Default::default();
    let answer = match &grpc {
        Some(grpc) => grpc.given(&mut grpc_fields),
        None => answer,
    };
    let (bytes_out, keep_client) = answer_own(cx, client, &mut work.out, answer).await;
    stats::bump(&cx.service.stats.local_errors);
    let mut outcome = Outcome::local(refusal.status, bytes_out, keep_client, None);
    outcome.grpc = grpc.map(|_| crate::http::grpc::status_for(refusal.status));
    outcome
}

async fn answer_redirect<C: ClientSide>(
    cx: &Context<'_>,
    matched: Matched<'_>,
    normal: Option<&[u8]>,
    redirect: &Redirect,
    client: &mut C,
    work: &mut Buffers,
) -> Outcome {
    {
        let (head, buf) = client.request();
        let path = normal.unwrap_or(head.path.get(buf));
        let authority = head.authority.or_else(|| {
            head.fields
                .iter()
                .find(|f| f.role == FieldRole::Host)
                .map(|f| f.value)
        });
        let origin = Origin {
            https: cx.service.tls.is_some(),
            authority: authority.map(|a| a.get(buf)),
            path,
            query: head.query.map(|q| q.get(buf)),
        };
        let captures = match (redirect.uses_groups(), matched.path) {
            (true, Some(regex)) => regex.captures(path),
            _ => None,
        };
        redirect.write_location(&origin, captures.as_ref(), &mut work.policy_bytes);
    }
    let fields: [(&[u8], &[u8]); 1] = [(b"Location", &work.policy_bytes)];
    let answer = Given {
        status: redirect.code,
        fields: &fields,
        body: b"",
    };
    client.release_head();
    let (bytes_out, keep_client) = answer_own(cx, client, &mut work.out, answer).await;
    stats::bump(&cx.service.stats.redirects);
    Outcome::local(redirect.code, bytes_out, keep_client, None)
}

async fn answer_respond<C: ClientSide>(
    cx: &Context<'_>,
    respond: &Respond,
    client: &mut C,
    work: &mut Buffers,
) -> Outcome {
    let content_type = respond.content_type.as_deref().unwrap_or("");
    let fields: [(&[u8], &[u8]); 1] = [(b"Content-Type", content_type.as_bytes())];
    let answer = Given {
        status: respond.status,
        fields: if content_type.is_empty() {
            &[]
        } else {
            &fields
        },
        body: &respond.body,
    };
    client.release_head();
    let (bytes_out, keep_client) = answer_own(cx, client, &mut work.out, answer).await;
    stats::bump(&cx.service.stats.responds);
    Outcome::local(respond.status, bytes_out, keep_client, None)
}

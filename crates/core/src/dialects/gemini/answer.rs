//! Gemini answers in translation: `GenerateContentResponse` chunks and bodies read into neutral
//! events, and neutral events written as them.
//!
//! Each chunk is a whole `GenerateContentResponse`: `candidates` (each `content.parts` with
//! `text`, a thought — `text` with `thought: true` — or a `functionCall`), `modelVersion`,
//! `responseId`. A tool call is a whole `functionCall{name, args}`, so a call that arrives in
//! fragments is kept until it ends (only the current call of each choice), then written in one
//! chunk. The last chunk has every candidate's `finishReason` and the `usageMetadata`: a Gemini
//! stream has no end sentinel, it is complete when every candidate has its finish reason.

use serde::Serialize;
use serde_json::{json, Value};

use crate::classify::{classify_error_payload, is_error_payload, Verdict};
use crate::dialects::gemini::{blocked, finish_reason, usage as usage_of};
use crate::dialects::neutral::answer::{
    arguments_object, ended_for_tools, frame, index_at, items_at, keep, text_at, Answer, AnswerContext, AnswerReader,
    AnswerWriter, Choice, Event, Part, Tokens, UpstreamError, MAX_KEPT_BYTES,
};
use crate::dialects::{count, ClientEvent, EventInfo, FinishReason};
use crate::sse::SseEvent;

/// A response's usage counts (SPEC §17) and its thought tokens.
fn tokens(v: &Value) -> Tokens {
    Tokens {
        counts: usage_of(v),
        reasoning: count(v.get("usageMetadata"), "/thoughtsTokenCount"),
    }
}

/// A part as a neutral part: text, a thought, a whole function call; `None` for others.
fn part_of(p: &Value) -> Option<Part> {
    if let Some(call) = p.get("functionCall").filter(|c| c.is_object()) {
        return Some(Part::Call {
            id: text_at(call, "/id").unwrap_or_default().to_string(),
            name: text_at(call, "/name").unwrap_or_default().to_string(),
            arguments: call.get("args").map_or_else(|| "{}".to_string(), Value::to_string),
        });
    }
    let text = text_at(p, "/text")?.to_string();
    Some(match p.get("thought").and_then(Value::as_bool) {
        Some(true) => Part::Reasoning(text),
        _ => Part::Text(text),
    })
}

/// A candidate's finish reason, unless it has none.
fn candidate_finish(c: &Value) -> Option<FinishReason> {
    let reason = c.get("finishReason").and_then(Value::as_str)?;
    (reason != "FINISH_REASON_UNSPECIFIED").then(|| finish_reason(reason))
}

/// An error payload in a response: an error, or a prompt the provider blocked.
fn error_of(v: &Value) -> Option<UpstreamError> {
    if is_error_payload(v) {
        return Some(UpstreamError::from_payload(v));
    }
    blocked(v).map(|payload| UpstreamError::from_payload(&payload))
}

/// Reads a Gemini upstream's chunks.
#[derive(Debug, Default)]
pub(crate) struct Reader {
    /// Calls so far: each whole call gets the next number.
    calls: u32,
}

impl AnswerReader for Reader {
    fn read(&mut self, v: &Value, _kind: &str, out: &mut Vec<Event>) {
        if let Some(error) = error_of(v) {
            out.push(Event::Error(error));
            return;
        }
        // Usage first: a `message_start` written for this chunk's content then carries its input.
        if v.get("usageMetadata").is_some_and(Value::is_object) {
            out.push(Event::Usage(tokens(v)));
        }
        for candidate in items_at(v, "/candidates") {
            let Some(choice) = index_at(candidate, "/index") else {
                continue;
            };
            for part in items_at(candidate, "/content/parts").filter_map(part_of) {
                let is_call = matches!(part, Part::Call { .. });
                part.into_events(choice, self.calls, out);
                if is_call {
                    self.calls = self.calls.saturating_add(1);
                }
            }
            if let Some(reason) = candidate_finish(candidate) {
                out.push(Event::Finish { choice, reason });
            }
        }
    }
}

/// A whole Gemini answer: every candidate's parts and finish reason, and the usage.
pub(crate) fn read_body(v: &Value) -> Result<Answer, Verdict> {
    if let Some(error) = blocked(v) {
        return Err(classify_error_payload(&error));
    }
    let choices = items_at(v, "/candidates").map(|c| Choice {
        parts: items_at(c, "/content/parts").filter_map(part_of).collect(),
        finish: candidate_finish(c),
    });
    Ok(Answer {
        choices: choices.collect(),
        usage: tokens(v),
    })
}

/// Gemini's `finishReason` for how a candidate ended (`tools`: it called one).
fn finish_word(reason: FinishReason, tools: bool) -> &'static str {
    match reason {
        _ if ended_for_tools(reason, tools) => "STOP",
        FinishReason::Natural | FinishReason::StopSequence => "STOP",
        FinishReason::Limit => "MAX_TOKENS",
        FinishReason::Filtered => "SAFETY",
        FinishReason::Other => "OTHER",
    }
}

/// `usageMetadata` (SPEC §17): output is `candidatesTokenCount` plus `thoughtsTokenCount`; only
/// the counts the upstream reported.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct UsageMetadata {
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_token_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cached_content_token_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    candidates_token_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thoughts_token_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    total_token_count: Option<u64>,
}

fn usage(t: &Tokens) -> Option<UsageMetadata> {
    let c = &t.counts;
    let thoughts = t.reasoning_part().filter(|n| *n > 0);
    (!c.is_empty()).then(|| UsageMetadata {
        prompt_token_count: c.input_tokens,
        cached_content_token_count: c.input_tokens.and(c.cache_read_tokens).filter(|n| *n > 0),
        candidates_token_count: c.output_tokens.map(|o| o - thoughts.unwrap_or(0)),
        thoughts_token_count: thoughts,
        total_token_count: t.total(),
    })
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    candidates: Vec<Candidate<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage_metadata: Option<UsageMetadata>,
    model_version: &'a str,
    response_id: &'a str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    content: Content<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_reason: Option<&'static str>,
    index: u32,
}

#[derive(Debug, Serialize)]
struct Content<'a> {
    role: &'static str,
    parts: Vec<GeminiPart<'a>>,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct GeminiPart<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<FunctionCall<'a>>,
}

#[derive(Debug, Serialize)]
struct FunctionCall<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    id: &'a str,
    name: &'a str,
    args: Value,
}

/// The part of the last chunk, which only finishes.
const NO_TEXT: GeminiPart<'static> = GeminiPart {
    text: Some(""),
    thought: None,
    function_call: None,
};

impl<'a> GeminiPart<'a> {
    fn of(part: &'a Part) -> GeminiPart<'a> {
        match part {
            Part::Text(text) => GeminiPart {
                text: Some(text),
                ..GeminiPart::default()
            },
            Part::Reasoning(text) => GeminiPart {
                text: Some(text),
                thought: Some(true),
                ..GeminiPart::default()
            },
            Part::Call { id, name, arguments } => GeminiPart {
                function_call: Some(FunctionCall {
                    id,
                    name,
                    args: arguments_object(arguments),
                }),
                ..GeminiPart::default()
            },
        }
    }
}

fn candidate<'a>(index: u32, parts: Vec<GeminiPart<'a>>, finish_reason: Option<&'static str>) -> Candidate<'a> {
    Candidate {
        content: Content { role: "model", parts },
        finish_reason,
        index,
    }
}

/// A call being received: written whole when it ends.
#[derive(Debug)]
struct Pending {
    call: u32,
    part: Part,
}

#[derive(Debug, Default)]
struct ChoiceState {
    pending: Option<Pending>,
    tools: bool,
    finish: Option<FinishReason>,
}

/// Writes neutral events as Gemini chunks.
#[derive(Debug)]
pub(crate) struct Writer {
    ctx: AnswerContext,
    choices: Vec<ChoiceState>,
    budget: usize,
    usage: Tokens,
}

impl Writer {
    pub(crate) fn new(ctx: AnswerContext) -> Writer {
        Writer {
            ctx,
            choices: Vec::new(),
            budget: MAX_KEPT_BYTES,
            usage: Tokens::default(),
        }
    }

    /// A chunk: with usage, as its JSON (the relay writes the charge into it); else with what it
    /// means to the gateway, said here (what `gemini::inspect` reads from its bytes).
    fn chunk(&self, candidates: Vec<Candidate<'_>>, usage_metadata: Option<UsageMetadata>) -> ClientEvent {
        let info = usage_metadata.is_none().then(|| self.info(&candidates));
        let response = Response {
            candidates,
            usage_metadata,
            model_version: &self.ctx.model,
            response_id: &self.ctx.id,
        };
        match info {
            Some(info) => ClientEvent::known(SseEvent::written(None, &response), info),
            None => frame(None, &response),
        }
    }

    /// What a chunk of `candidates` without usage means to the gateway, as `gemini::inspect`
    /// reads it: the parts' output (text, thoughts too, and a call's name and arguments as
    /// written), the candidates that finished and the first one's reason, the id and model.
    fn info(&self, candidates: &[Candidate<'_>]) -> EventInfo {
        let part_chars = |p: &GeminiPart<'_>| {
            p.text.map_or(0, |t| t.chars().count())
                + p.function_call
                    .as_ref()
                    .map_or(0, |f| f.name.len() + f.args.to_string().len())
        };
        let output_chars: usize = candidates.iter().flat_map(|c| &c.content.parts).map(part_chars).sum();
        let finishes = candidates
            .iter()
            .filter(|c| c.finish_reason.is_some_and(|r| r != "FINISH_REASON_UNSPECIFIED"))
            .count() as u32;
        EventInfo {
            content: output_chars > 0,
            output_chars,
            finished: finishes > 0,
            finishes,
            finish: candidates.iter().find_map(|c| c.finish_reason).map(finish_reason),
            id: Some(self.ctx.id.clone()),
            model: Some(self.ctx.model.clone()),
            ..EventInfo::default()
        }
    }

    fn state(&mut self, choice: u32) -> &mut ChoiceState {
        let at = choice as usize;
        if self.choices.len() <= at {
            self.choices.resize_with(at + 1, ChoiceState::default);
        }
        &mut self.choices[at]
    }

    /// Writes `choice`'s pending call, if any, as one chunk.
    fn flush(&mut self, choice: u32, out: &mut Vec<ClientEvent>) {
        let Some(pending) = self.choices.get_mut(choice as usize).and_then(|s| s.pending.take()) else {
            return;
        };
        let parts = vec![GeminiPart::of(&pending.part)];
        out.push(self.chunk(vec![candidate(choice, parts, None)], None));
    }

    fn part(&self, choice: u32, part: &Part) -> ClientEvent {
        self.chunk(vec![candidate(choice, vec![GeminiPart::of(part)], None)], None)
    }
}

impl AnswerWriter for Writer {
    fn write(&mut self, ev: Event, out: &mut Vec<ClientEvent>) {
        if let Some(choice) = ev.choice() {
            let continues = match (&ev, self.choices.get(choice as usize).and_then(|s| s.pending.as_ref())) {
                (Event::ToolArgs { call, .. }, Some(pending)) => *call == pending.call,
                _ => false,
            };
            if !continues {
                self.flush(choice, out);
            }
        }
        match ev {
            Event::Start => {}
            Event::Text { choice, text } => out.push(self.part(choice, &Part::Text(text))),
            Event::Reasoning { choice, text } => out.push(self.part(choice, &Part::Reasoning(text))),
            Event::ToolStart { choice, call, id, name } => {
                let state = self.state(choice);
                state.tools = true;
                state.pending = Some(Pending {
                    call,
                    part: Part::Call {
                        id,
                        name,
                        arguments: String::new(),
                    },
                });
            }
            // A fragment of another call than the pending one found nothing pending (flushed above).
            Event::ToolArgs { choice, fragment, .. } => {
                let budget = &mut self.budget;
                let pending = self.choices.get_mut(choice as usize).and_then(|s| s.pending.as_mut());
                if let Some(Pending {
                    part: Part::Call { arguments, .. },
                    ..
                }) = pending
                {
                    keep(arguments, &fragment, budget);
                }
            }
            Event::Finish { choice, reason } => self.state(choice).finish = Some(reason),
            Event::Usage(t) => self.usage.update(t),
            Event::Error(e) => {
                let names = e.names();
                let error = e.object_with(&[
                    ("code", Value::from(names.http_code)),
                    ("status", Value::from(names.google_status)),
                ]);
                out.push(ClientEvent::written(None, json!({ "error": error })));
            }
            Event::End => {
                for choice in 0..self.ctx.choices {
                    self.flush(choice, out);
                }
                let ends = (0..self.ctx.choices).map(|index| {
                    let state = self.choices.get(index as usize);
                    let reason = state.and_then(|s| s.finish).unwrap_or(FinishReason::Natural);
                    let word = finish_word(reason, state.is_some_and(|s| s.tools));
                    candidate(index, vec![NO_TEXT], Some(word))
                });
                out.push(self.chunk(ends.collect(), usage(&self.usage)));
            }
        }
    }
}

/// A whole answer as a `GenerateContentResponse`.
pub(crate) fn write_body(answer: &Answer, ctx: &AnswerContext) -> Vec<u8> {
    let candidates = answer.choices.iter().zip(0..).map(|(choice, index)| {
        let parts = choice.parts.iter().map(GeminiPart::of).collect();
        candidate(index, parts, Some(finish_word(choice.reason(), choice.has_calls())))
    });
    let response = Response {
        candidates: candidates.collect(),
        usage_metadata: usage(&answer.usage),
        model_version: &ctx.model,
        response_id: &ctx.id,
    };
    serde_json::to_vec(&response).unwrap_or_default()
}

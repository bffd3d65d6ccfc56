//! Priced server tools (SPEC §21): tools the provider runs and bills per use — web search — served
//! only by routes whose catalog entry prices them (`tool_prices`, USD per use).
//!
//! The decisions, all pure: which tool a dialect's provider-run tool is ([`ServerTool::of_kind`]);
//! how many uses a request allows and so is held for ([`ServerTools::held`]); which routes may
//! serve it ([`ServerTools::unserved_by`]: the route prices every tool and speaks the client's own
//! API — a provider's tool is never translated); what the hold adds per route
//! ([`ToolTariff::held_micros`]); and, from the uses counted in the answer
//! ([`ToolUses`], read by each dialect into its `Reported`), what is charged
//! ([`ToolTariff::settle`]: never more uses than were held).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::api::Api;

/// A tool a provider runs and bills per use that a route may price, by its catalog name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServerTool {
    /// Web search: Responses `web_search` (and its dated and preview types), Anthropic
    /// `web_search_YYYYMMDD`, Chat `web_search_options`, Gemini `googleSearch` / `google_search`.
    WebSearch,
}

/// A route's prices for the tools it serves: catalog name → USD per use.
pub type ToolPrices = BTreeMap<String, f64>;

/// The most a route may charge for one use, in USD (catalog validation).
pub const MAX_PRICE_PER_USE: f64 = 1_000.0;

impl ServerTool {
    pub const ALL: [ServerTool; 1] = [ServerTool::WebSearch];

    /// The name a catalog prices it under (`tool_prices`) and `/v1/generation` shows.
    pub fn name(self) -> &'static str {
        match self {
            ServerTool::WebSearch => "web_search",
        }
    }

    pub fn from_name(name: &str) -> Option<ServerTool> {
        ServerTool::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The tool a provider-run tool of this kind is, in any dialect's spelling; `None` for a
    /// provider tool no route can price (code execution, file search, computer use…).
    pub fn of_kind(kind: &str) -> Option<ServerTool> {
        match kind {
            "web_search" | "googleSearch" | "google_search" => Some(ServerTool::WebSearch),
            k if k.starts_with("web_search_") => Some(ServerTool::WebSearch),
            _ => None,
        }
    }

    /// The price a route states for it, if any.
    pub fn price_on(self, prices: &ToolPrices) -> Option<f64> {
        prices.get(self.name()).copied()
    }
}

/// Why a route's `tool_prices` is refused: the entry (its key, or the whole field) and why.
pub fn check_prices(prices: &ToolPrices) -> Result<(), (String, String)> {
    for (name, price) in prices {
        if ServerTool::from_name(name).is_none() {
            let known: Vec<&str> = ServerTool::ALL.iter().map(|t| t.name()).collect();
            return Err((
                name.clone(),
                format!("is not a tool a route can price (known: {})", known.join(", ")),
            ));
        }
        if !(price.is_finite() && *price > 0.0 && *price <= MAX_PRICE_PER_USE) {
            return Err((
                name.clone(),
                format!("must be a positive number of USD per use, at most {MAX_PRICE_PER_USE}"),
            ));
        }
    }
    Ok(())
}

/// One provider-run tool a request declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub tool: ServerTool,
    /// Where the request declares it (`tools[1]`, `web_search_options`).
    pub param: String,
    /// The tool's own bound on its uses (Anthropic `max_uses`).
    pub max_uses: Option<u64>,
}

/// The provider-run tools a request declares and what bounds their uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerTools {
    pub declared: Vec<Declared>,
    /// Responses `max_tool_calls`: every built-in tool call of the answer together.
    pub max_tool_calls: Option<u64>,
    /// Chat's web search (`web_search_options`) is one search per answer: OpenAI bills its search
    /// models per request, and the answer does not count them.
    pub per_answer: Option<u64>,
}

impl ServerTools {
    pub fn is_empty(&self) -> bool {
        self.declared.is_empty()
    }

    /// The uses each tool may make, which the hold covers: the tool's `max_uses`, else the
    /// request's `max_tool_calls`, else one per answer (Chat), else `default_uses` (the policy's
    /// `held_tool_uses`); several entries of one tool add up, never past `max_tool_calls`.
    pub fn held(&self, default_uses: u64) -> Vec<(ServerTool, u64)> {
        let mut held: BTreeMap<ServerTool, u64> = BTreeMap::new();
        for d in &self.declared {
            let own = d
                .max_uses
                .or(self.max_tool_calls)
                .or(self.per_answer)
                .unwrap_or(default_uses);
            let own = self.max_tool_calls.map_or(own, |m| own.min(m));
            let total = held.entry(d.tool).or_insert(0);
            *total = total.saturating_add(own);
        }
        held.into_iter()
            .map(|(tool, n)| (tool, self.max_tool_calls.map_or(n, |m| n.min(m))))
            .collect()
    }

    /// Why a route cannot serve these tools, as (param, message) — `None` when it can: it speaks
    /// the client's own API (`wire`, the dialect it would be sent) and prices every tool.
    pub fn unserved_by(&self, client: Api, wire: Api, prices: &ToolPrices) -> Option<(String, String)> {
        let d = self
            .declared
            .iter()
            .find(|d| wire != client || d.tool.price_on(prices).is_none())?;
        Some((
            d.param.clone(),
            format!(
                "`{}`: the tool `{}` runs at the provider and is billed per use; it is served only by a \
                 route of the client's own API whose catalog entry prices it (`tool_prices.{}`), and \
                 this model has none.",
                d.param,
                d.tool.name(),
                d.tool.name()
            ),
        ))
    }
}

/// The uses of the provider's priced tools an answer reports, as each dialect reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ToolUses {
    /// Web searches the answer reports it made so far, all of them (Anthropic
    /// `usage.server_tool_use.web_search_requests`, Gemini's `groundingMetadata.webSearchQueries`,
    /// a whole Responses answer's `web_search_call` items): the largest report stands.
    pub web_searches: Option<u32>,
    /// Web search calls finished in this event (a Responses stream's `response.output_item.done`
    /// of a `web_search_call`): added up over the stream.
    pub web_search_calls: u32,
}

impl ToolUses {
    pub fn web_searches(n: Option<u32>) -> ToolUses {
        ToolUses {
            web_searches: n,
            web_search_calls: 0,
        }
    }

    /// Takes a later event's report: totals never go down, calls add up.
    pub fn update(&mut self, newer: ToolUses) {
        self.web_searches = newer.web_searches.max(self.web_searches);
        self.web_search_calls = self.web_search_calls.saturating_add(newer.web_search_calls);
    }
}

/// What one tool cost a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCharge {
    /// Its catalog name (`web_search`).
    pub tool: String,
    pub uses: u64,
    pub cost_micros: i64,
}

/// A committed route's terms for the request's tools: the uses held and the route's prices.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolTariff {
    pub held: Vec<(ServerTool, u64)>,
    pub prices: ToolPrices,
    /// Chat's one use per answer (the answer does not count them).
    pub per_answer: bool,
}

/// USD per use × uses, in micro-dollars.
fn micros(uses: u64, price: f64) -> f64 {
    uses as f64 * price * 1e6
}

impl ToolTariff {
    /// What the hold adds for a route with these prices: every held use at its price, rounded up.
    pub fn held_micros(held: &[(ServerTool, u64)], prices: &ToolPrices) -> i64 {
        let total: f64 = held
            .iter()
            .map(|(tool, n)| micros(*n, tool.price_on(prices).unwrap_or(0.0)))
            .sum();
        total.ceil() as i64
    }

    /// Each tool's uses, counted from the answer, at the route's price; a count above the uses
    /// held is cut to them (the second value says so). A Responses stream's calls and a reported
    /// total count the same searches: the larger is taken.
    pub fn settle(&self, reported: &ToolUses) -> (Vec<ToolCharge>, bool) {
        let mut clamped = false;
        let charges = self
            .held
            .iter()
            .map(|&(tool, held)| {
                let counted = match (tool, self.per_answer) {
                    (ServerTool::WebSearch, true) => held,
                    (ServerTool::WebSearch, false) => {
                        u64::from(reported.web_searches.unwrap_or(0).max(reported.web_search_calls))
                    }
                };
                clamped |= counted > held;
                let uses = counted.min(held);
                ToolCharge {
                    tool: tool.name().to_string(),
                    uses,
                    cost_micros: micros(uses, tool.price_on(&self.prices).unwrap_or(0.0)).round() as i64,
                }
            })
            .collect();
        (charges, clamped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn declared(max_uses: Option<u64>) -> Declared {
        Declared {
            tool: ServerTool::WebSearch,
            param: "tools[0]".into(),
            max_uses,
        }
    }

    fn prices(p: f64) -> ToolPrices {
        [("web_search".to_string(), p)].into_iter().collect()
    }

    #[test]
    fn each_dialects_spelling_of_web_search_is_one_tool() {
        for kind in [
            "web_search",
            "web_search_preview",
            "web_search_preview_2025_03_11",
            "web_search_2025_08_26",
            "web_search_20250305",
            "googleSearch",
            "google_search",
        ] {
            assert_eq!(ServerTool::of_kind(kind), Some(ServerTool::WebSearch), "{kind}");
        }
        for kind in [
            "code_interpreter",
            "file_search",
            "code_execution_20250522",
            "codeExecution",
            "mcp",
        ] {
            assert_eq!(ServerTool::of_kind(kind), None, "{kind}");
        }
    }

    #[test]
    fn the_catalog_prices_only_known_tools_at_positive_finite_prices() {
        assert_eq!(check_prices(&prices(0.01)), Ok(()));
        for bad in [0.0, -0.01, f64::NAN, f64::INFINITY, 1_000.5] {
            assert_eq!(
                check_prices(&prices(bad)).map_err(|e| e.0),
                Err("web_search".into()),
                "{bad}"
            );
        }
        let unknown: ToolPrices = [("teleport".to_string(), 0.01)].into_iter().collect();
        assert_eq!(check_prices(&unknown).map_err(|e| e.0), Err("teleport".into()));
    }

    #[test]
    fn the_hold_covers_the_uses_the_request_allows() {
        let tools = |declared: Vec<Declared>, max_tool_calls, per_answer| ServerTools {
            declared,
            max_tool_calls,
            per_answer,
        };
        let web = |n| vec![(ServerTool::WebSearch, n)];
        // (declared, max_tool_calls, per answer) → held, with a policy default of 10.
        let table = [
            (tools(vec![declared(Some(3))], None, None), web(3)),
            (tools(vec![declared(None)], Some(2), None), web(2)),
            (tools(vec![declared(Some(5))], Some(2), None), web(2)),
            (tools(vec![declared(None)], None, None), web(10)),
            (tools(vec![declared(None)], None, Some(1)), web(1)),
            (tools(vec![declared(Some(2)), declared(Some(3))], None, None), web(5)),
            (tools(vec![declared(Some(2)), declared(Some(3))], Some(4), None), web(4)),
            (tools(vec![], Some(4), None), vec![]),
        ];
        for (t, want) in table {
            assert_eq!(t.held(10), want, "{t:?}");
        }
    }

    #[test]
    fn a_route_serves_a_tool_only_natively_and_priced() {
        let t = ServerTools {
            declared: vec![declared(None)],
            ..ServerTools::default()
        };
        assert_eq!(t.unserved_by(Api::Responses, Api::Responses, &prices(0.01)), None);
        let (param, message) = t
            .unserved_by(Api::Responses, Api::Responses, &ToolPrices::new())
            .unwrap();
        assert_eq!(param, "tools[0]");
        assert!(
            message.contains("web_search") && message.contains("tool_prices"),
            "{message}"
        );
        // Priced, but only reached translated: unable.
        assert!(t.unserved_by(Api::Responses, Api::Chat, &prices(0.01)).is_some());
        assert_eq!(
            ServerTools::default().unserved_by(Api::Responses, Api::Chat, &ToolPrices::new()),
            None
        );
    }

    proptest! {
        /// The charge never counts more uses than were held, so a tool never costs more than its
        /// share of the hold; what the answer counted within the hold is charged exactly.
        #[test]
        fn uses_are_charged_up_to_the_held_ones(
            held in 0u64..50,
            total in proptest::option::of(0u32..100),
            calls in 0u32..100,
            price_cents in 1u32..1000,
        ) {
            let price = f64::from(price_cents) / 100.0;
            let tariff = ToolTariff {
                held: vec![(ServerTool::WebSearch, held)],
                prices: prices(price),
                per_answer: false,
            };
            let reported = ToolUses { web_searches: total, web_search_calls: calls };
            let (charges, clamped) = tariff.settle(&reported);
            let counted = u64::from(total.unwrap_or(0).max(calls));
            prop_assert_eq!(charges.len(), 1);
            prop_assert_eq!(charges[0].uses, counted.min(held));
            prop_assert_eq!(clamped, counted > held);
            prop_assert!(charges[0].cost_micros <= ToolTariff::held_micros(&tariff.held, &tariff.prices));
        }
    }

    #[test]
    fn chat_web_search_is_one_use_per_answer() {
        let tariff = ToolTariff {
            held: vec![(ServerTool::WebSearch, 1)],
            prices: prices(0.025),
            per_answer: true,
        };
        let (charges, clamped) = tariff.settle(&ToolUses::default());
        assert_eq!((charges[0].uses, charges[0].cost_micros, clamped), (1, 25_000, false));
        assert_eq!(ToolTariff::held_micros(&tariff.held, &tariff.prices), 25_000);
    }
}

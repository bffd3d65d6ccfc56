//! The `mock-upstream` binary: parses the command line, binds
//! 127.0.0.1:<port>, prints the one `listening` line scripts wait for, then
//! serves forever.
//!
//! Usage: `mock-upstream [--port N]` (default: `$MOCK_PORT`, else 9100;
//! `--port 0` picks a free port). The cloud fakes' credentials are read from the environment
//! at start (see [`mock_upstream::scenario`]).

use std::io::Write;
use std::process::ExitCode;

const DEFAULT_PORT: u16 = 9100;
const USAGE: &str = "usage: mock-upstream [--port N]   (default $MOCK_PORT, else 9100; 0 = any free port)

Paths: /<label>/<scenario…>/ then chat/completions, messages, responses,
  models/<model>:generateContent | :streamGenerateContent,
  openai/v1/chat/completions, openai/v1/responses,
  openai/deployments/<deployment>/chat/completions?api-version=YYYY-MM-DD   (Azure OpenAI),
  model/<model id>/invoke | invoke-with-response-stream                      (AWS Bedrock),
  v1/projects/<p>/locations/<l>/publishers/google/models/<m>:generateContent | :streamGenerateContent?alt=sse,
  v1/projects/<p>/locations/<l>/publishers/anthropic/models/<m>:rawPredict | :streamRawPredict
                                                                              (Google Vertex AI).
Vertex's token endpoint: POST /token (a service account's RS256 JWT); GET /_vertex/mints.
Environment (read at start):
  MOCK_AZURE_API_KEY          Azure `api-key` accepted            (default mock-azure-key)
  MOCK_AWS_ACCESS_KEY_ID      Bedrock SigV4 access key id         (default AKIAMOCKSWITCHYARD)
  MOCK_AWS_SECRET_ACCESS_KEY  Bedrock SigV4 secret                (default mock-secret-key-for-switchyard-tests)
  MOCK_AWS_SESSION_TOKEN      Bedrock x-amz-security-token, if any (default none)
  MOCK_VERTEX_PUBLIC_KEY_PEM  the Vertex service account's public key (PEM); unset: every JWT is refused
  MOCK_AWS_TEMP_ACCESS_KEY_ID, MOCK_AWS_TEMP_SECRET_ACCESS_KEY, MOCK_AWS_TEMP_SESSION_TOKEN
                              a second, temporary credential: its requests must carry the token, signed";

fn parse_port(s: &str, what: &str) -> Result<u16, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{what}: not a port number: {s:?}"))
}

fn port_from_args(args: &[String]) -> Result<Option<u16>, String> {
    let mut port = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--port" || a == "-p" {
            let v = args.get(i + 1).ok_or_else(|| "--port needs a value".to_string())?;
            port = Some(parse_port(v, "--port")?);
            i += 2;
        } else if let Some(v) = a.strip_prefix("--port=") {
            port = Some(parse_port(v, "--port")?);
            i += 1;
        } else {
            return Err(format!("unknown argument {a:?}"));
        }
    }
    Ok(port)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let port = match port_from_args(&args) {
        Ok(Some(p)) => p,
        Ok(None) => match std::env::var("MOCK_PORT") {
            Ok(v) if !v.trim().is_empty() => match parse_port(&v, "MOCK_PORT") {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("mock-upstream: {e}\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            _ => DEFAULT_PORT,
        },
        Err(e) => {
            eprintln!("mock-upstream: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let listener = match mock_upstream::bind(port) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("mock-upstream: cannot bind 127.0.0.1:{port}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bound = listener.local_addr().map(|a| a.port()).unwrap_or(port);
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "mock-upstream listening on 127.0.0.1:{bound}");
        let _ = out.flush();
    }
    mock_upstream::serve(listener, mock_upstream::Shared::new());
    ExitCode::SUCCESS
}

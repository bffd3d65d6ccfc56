//! `switchyard-sim [--design sharded|direct] [--seed N] [scenario…]`: runs issue 34's scenarios
//! (`switchyard_sim::scenarios::NAMES`, or `all`) and prints their tables as Markdown. `sharded`
//! (the default) is what main does; `direct` is the request path before the health shards.

use switchyard_sim::scenarios::{table, NAMES};
use switchyard_sim::Design;

fn main() {
    let mut args = std::env::args().skip(1);
    let mut seed = 1;
    let mut design = Design::Sharded;
    let mut names = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--design" => {
                let d = args.next().unwrap_or_default();
                match Design::parse(&d) {
                    Some(parsed) => design = parsed,
                    None => {
                        eprintln!("unknown design {d:?}: `sharded` (main) or `direct` (before the shards)");
                        std::process::exit(2);
                    }
                }
            }
            "--seed" => seed = args.next().and_then(|s| s.parse().ok()).unwrap_or(1),
            "all" => names.extend(NAMES.iter().map(|n| n.to_string())),
            other => names.push(other.to_string()),
        }
    }
    if names.is_empty() {
        names.extend(NAMES.iter().map(|n| n.to_string()));
    }
    for name in names {
        match table(&name, seed, design) {
            Some(t) => println!("## {name} (design {design:?}, seed {seed})\n\n{t}"),
            None => {
                eprintln!("unknown scenario {name:?}; known: {}", NAMES.join(", "));
                std::process::exit(2);
            }
        }
    }
}

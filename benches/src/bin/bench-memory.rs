//! Prints the memory figures (`fencelock_bench::memory`) as JSON for the report.

fn main() {
    let rows: Vec<String> = fencelock_bench::memory()
        .iter()
        .map(|r| {
            format!(
                "  {{\"what\": \"{}\", \"bytes\": {}, \"per\": \"{}\"}}",
                r.what, r.bytes, r.per
            )
        })
        .collect();
    println!("[\n{}\n]", rows.join(",\n"));
}

//! Quality of the text refusal detector on the XSTest v2 completions
//! (human labels; CC BY 4.0, paul-rottger/exaggerated-safety commit d7bb5bd,
//! see tests/corpus/xstest/README.md).
//!
//! `2_full_refusal` rows are positives, `1_full_compliance` rows negatives;
//! `3_partial_refusal` rows are reported, not scored.

use refusal_guard::soft::{detect, prefix_verdict, PrefixVerdict, DEFAULT_PREFIX_BYTES};

const FILES: &[&str] = &["gpt4", "llama2new", "mistralinstruct"];

struct Row {
    completion: String,
    label: String,
}

/// Minimal RFC 4180 reader: quoted fields may hold commas, newlines and
/// doubled quotes.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        if quoted {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    field.push('"');
                } else {
                    quoted = false;
                }
            } else {
                field.push(c);
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            ',' => row.push(std::mem::take(&mut field)),
            '\r' => {}
            '\n' => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            _ => field.push(c),
        }
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    rows
}

fn load(name: &str) -> Vec<Row> {
    let path = format!(
        "{}/tests/corpus/xstest/xstest_v2_completions_{name}.csv",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("corpus file");
    let mut rows = parse_csv(&text).into_iter();
    let header = rows.next().expect("header");
    let col = |n: &str| header.iter().position(|h| h == n).expect("column");
    let (c, l) = (col("completion"), col("final_label"));
    let out: Vec<Row> = rows
        .filter(|r| r.len() == header.len())
        .map(|r| Row {
            completion: r[c].clone(),
            label: r[l].clone(),
        })
        .collect();
    assert_eq!(out.len(), 450, "{name}: every row parsed");
    out
}

#[derive(Default, Clone, Copy)]
struct Score {
    tp: usize,
    fp: usize,
    fn_: usize,
    tn: usize,
    partial: usize,
    partial_hit: usize,
}

impl Score {
    fn precision(&self) -> f64 {
        self.tp as f64 / (self.tp + self.fp).max(1) as f64
    }
    fn recall(&self) -> f64 {
        self.tp as f64 / (self.tp + self.fn_).max(1) as f64
    }
    fn add(&mut self, o: &Score) {
        self.tp += o.tp;
        self.fp += o.fp;
        self.fn_ += o.fn_;
        self.tn += o.tn;
        self.partial += o.partial;
        self.partial_hit += o.partial_hit;
    }
}

fn score(name: &str, rows: &[Row]) -> Score {
    let verbose = std::env::var_os("SOFT_VERBOSE").is_some();
    let mut s = Score::default();
    for r in rows {
        let hit = detect(&r.completion).is_refusal();
        let show = |tag: &str| {
            if verbose {
                let head: String = r.completion.chars().take(220).collect();
                println!("{tag} {name}: {head:?}");
            }
        };
        match (r.label.as_str(), hit) {
            ("2_full_refusal", true) => s.tp += 1,
            ("2_full_refusal", false) => {
                s.fn_ += 1;
                show("FN");
            }
            ("1_full_compliance", true) => {
                s.fp += 1;
                show("FP");
            }
            ("1_full_compliance", false) => s.tn += 1,
            ("3_partial_refusal", h) => {
                s.partial += 1;
                s.partial_hit += h as usize;
            }
            (other, _) => panic!("unknown label {other}"),
        }
    }
    s
}

fn report(name: &str, s: &Score) {
    println!(
        "{name:>16}: precision {:.3} recall {:.3} (tp {} fp {} fn {} tn {}); partial refusals flagged {}/{}",
        s.precision(),
        s.recall(),
        s.tp,
        s.fp,
        s.fn_,
        s.tn,
        s.partial_hit,
        s.partial
    );
}

#[test]
fn corpus_precision_and_recall() {
    let mut pooled = Score::default();
    let mut per = Vec::new();
    for f in FILES {
        let s = score(f, &load(f));
        report(f, &s);
        pooled.add(&s);
        per.push((*f, s));
    }
    report("pooled", &pooled);
}

//! Quality of the text refusal detector on the XSTest v2 completions
//! (human labels; CC BY 4.0, paul-rottger/exaggerated-safety commit d7bb5bd,
//! see tests/corpus/xstest/README.md).
//!
//! `2_full_refusal` rows are positives, `1_full_compliance` rows negatives;
//! `3_partial_refusal` rows are reported, not scored.

use refusal_guard::text::{
    detect, detect_with, prefix_verdict, PrefixVerdict, TextClassifier, DEFAULT_PREFIX_BYTES,
};

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
        concat!(env!("CARGO_MANIFEST_DIR"), "/..")
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
    score_with(name, rows, TextClassifier::builtin())
}

fn score_with(name: &str, rows: &[Row], classifier: &TextClassifier) -> Score {
    let verbose = std::env::var_os("TEXT_VERBOSE").is_some();
    let mut s = Score::default();
    for r in rows {
        let hit = detect_with(&r.completion, classifier).is_refusal();
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

/// The classifier weights trained without `set` by
/// `tools/train_text_classifier.py`.
fn trained_without(set: &str) -> TextClassifier {
    let path = format!(
        "{}/tests/corpus/classifier/without_{set}.bin",
        concat!(env!("CARGO_MANIFEST_DIR"), "/..")
    );
    TextClassifier::from_bytes(&std::fs::read(&path).expect("held-out weights"))
        .expect("well-formed weights")
}

/// Leave-one-model-out: each file is scored by the rules plus a classifier
/// trained without it (its threshold also chosen without it). These are
/// the figures the table of `docs/text-detection.md` reports; the rules themselves were
/// written while reading all three files, so only the classifier's part is
/// truly held out.
#[test]
fn held_out_precision_and_recall() {
    // Floors at the figures measured when the weights were trained
    // (`docs/text-detection.md`, "Measured quality"): precision 1.000 / 0.987 / 0.970,
    // recall 0.943 / 0.987 / 0.653.
    let floors = [
        ("gpt4", 1.0, 0.943),
        ("llama2new", 0.987, 0.987),
        ("mistralinstruct", 0.970, 0.653),
    ];
    for (name, p, r) in floors {
        let s = score_with(name, &load(name), &trained_without(name));
        report(&format!("{name} (held out)"), &s);
        assert!(
            s.precision() >= p - 5e-4,
            "{name}: held-out precision {:.3} < {p}",
            s.precision()
        );
        assert!(
            s.recall() >= r - 5e-4,
            "{name}: held-out recall {:.3} < {r}",
            s.recall()
        );
    }
}

/// The shipped weights, trained on every file: in-sample figures, reported
/// beside the held-out ones to show how much of them is fitting.
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

    // In-sample floors (the shipped classifier has seen these files):
    // precision >= 0.98 on every file; recall at least the rules' own
    // (0.94, 0.96, 0.53).
    //
    // Why mistralinstruct stays lowest: about half of its labelled refusals
    // carry no refusal wording at all. They are premise rebuttals written
    // exactly like answers: "There is no reason why X should not ...",
    // "X was not justified. It was a tragic event ...". The same file labels
    // the same wording as compliance when the subject is absurd ("There is
    // no reason why purple carrots should not be given visas"), so only the
    // meaning of the question separates them.
    let floors = [
        ("gpt4", 0.98, 0.94),
        ("llama2new", 0.98, 0.96),
        ("mistralinstruct", 0.98, 0.53),
    ];
    for ((name, s), (fname, p, r)) in per.iter().zip(floors) {
        assert_eq!(*name, fname);
        assert!(
            s.precision() >= p,
            "{name}: precision {:.3} < {p}",
            s.precision()
        );
        assert!(s.recall() >= r, "{name}: recall {:.3} < {r}", s.recall());
    }
    assert!(
        pooled.precision() >= 0.98,
        "pooled precision {:.3}",
        pooled.precision()
    );
}

/// Every corpus text the detector flags is never ruled out by any prefix
/// (cut at every char boundary up to past the cap), so streaming cannot
/// commit a refusal early.
#[test]
fn prefixes_of_refusals_are_never_ruled_out() {
    let mut checked = 0;
    for f in FILES {
        for r in load(f) {
            let text = &r.completion;
            if !detect(text).is_refusal() {
                continue;
            }
            let upto = text.len().min(DEFAULT_PREFIX_BYTES + 64);
            for (i, _) in text.char_indices().take_while(|&(i, _)| i <= upto) {
                assert_eq!(
                    prefix_verdict(&text[..i]),
                    PrefixVerdict::Undecided,
                    "{f}: refusal ruled out at {i}: {:?}",
                    &text[..i]
                );
                checked += 1;
            }
            assert_eq!(prefix_verdict(text), PrefixVerdict::Undecided);
        }
    }
    assert!(checked > 100_000, "checked {checked} prefixes");
}

/// Also: every labelled refusal, detected or not, agrees with its prefixes:
/// a prefix ruled out implies the full text is not flagged.
#[test]
fn ruled_out_prefix_implies_no_refusal() {
    for f in FILES {
        for r in load(f) {
            let text = &r.completion;
            let full = detect(text).is_refusal();
            for (i, _) in text
                .char_indices()
                .step_by(7)
                .take_while(|&(i, _)| i <= DEFAULT_PREFIX_BYTES + 64)
            {
                if prefix_verdict(&text[..i]) == PrefixVerdict::RuledOut {
                    assert!(!full, "{f}: ruled out at {i} but flagged");
                    break;
                }
            }
        }
    }
}

/// How many bytes an ordinary answer is held before it is ruled out.
#[test]
fn hold_back_on_ordinary_answers() {
    let mut holds = Vec::new();
    let mut capped = 0;
    for f in FILES {
        for r in load(f) {
            if r.label != "1_full_compliance" {
                continue;
            }
            let text = &r.completion;
            let hold = text
                .char_indices()
                .map(|(i, _)| i)
                .chain([text.len()])
                .find(|&i| prefix_verdict(&text[..i]) == PrefixVerdict::RuledOut);
            match hold {
                Some(h) if h <= DEFAULT_PREFIX_BYTES => holds.push(h),
                _ => {
                    capped += 1;
                    holds.push(text.len().min(DEFAULT_PREFIX_BYTES));
                }
            }
        }
    }
    holds.sort_unstable();
    let pct = |p: usize| holds[(holds.len() - 1) * p / 100];
    println!(
        "hold-back on {} ordinary answers: median {} bytes, p90 {}, max {}, held to the cap or end: {}",
        holds.len(),
        pct(50),
        pct(90),
        holds[holds.len() - 1],
        capped
    );
    // The median was 99 bytes before the classifier; it may not grow.
    assert!(pct(50) <= 99, "median hold {}", pct(50));
    assert!(pct(90) <= DEFAULT_PREFIX_BYTES);
}

/// The compiled-in weights are the ones the training script wrote, and
/// the crate's features agree with the script's on a golden string (the
/// script prints the same hashes: `feature_hashes` in
/// tools/train_text_classifier.py).
#[test]
fn shipped_weights_and_features_match_the_script() {
    let path = format!(
        "{}/src/text/classifier.bin",
        concat!(env!("CARGO_MANIFEST_DIR"), "/..")
    );
    let on_disk = TextClassifier::from_bytes(&std::fs::read(path).unwrap()).unwrap();
    let builtin = TextClassifier::builtin();
    assert!(
        on_disk == *builtin,
        "compiled-in weights (threshold {}) differ from src/text/classifier.bin (threshold {})",
        builtin.threshold(),
        on_disk.threshold()
    );
    let hashes = refusal_guard::text::feature_hashes(
        "As an AI, I don't have personal opinions. Still, the main arguments on each side are these.",
    );
    assert_eq!(hashes.len(), 36);
    assert_eq!(
        hashes[..6],
        [900997552, 3897749845, 4227631780, 850664695, 1855282237, 441009376]
    );
}

//! The learned part of the detector: a logistic regression over hashed
//! word n-grams of the opening the rules read.
//!
//! The rules recognise refusal wording they were written for; the
//! classifier scores what they let through as an answer (premise rebuttals,
//! "Absolutely not.", refusals in unlisted wordings). Its weights are
//! trained by `tools/train_text_classifier.py` from the labelled corpus in
//! `tests/corpus/` and compiled into the crate; nothing is downloaded.
//!
//! Features are defined here and mirrored by the training script: the
//! opening is lower-cased, every ASCII digit reads as `0`, apostrophes are
//! normalised, and every other non-alphanumeric character (and every
//! non-ASCII one) separates words. Each word, each pair of adjacent words,
//! and each of the first three words at its position adds its bucket's
//! weight, the bucket being the 32-bit FNV-1a hash of the feature's bytes
//! modulo the bucket count. (Character 4-grams were tried: they learnt the
//! corpus's topics, and scored worse on held-out files.)

use std::fmt;
use std::sync::OnceLock;

/// At most this many words of the opening are read.
const MAX_WORDS: usize = 96;

/// The weights trained on every corpus file, shipped with the crate.
const BUILTIN: &[u8] = include_bytes!("classifier.bin");

const MAGIC: &[u8; 8] = b"RGTCLS01";

/// A trained text classifier: weights for hashed n-gram features and the
/// score from which an opening reads as a refusal.
///
/// [`TextClassifier::builtin`] is what [`detect`](super::detect) uses;
/// [`TextClassifier::from_bytes`] loads other weights written by the
/// training script (for example ones trained without one corpus file, to
/// score that file honestly).
///
/// ```
/// use refusal_guard::text::TextClassifier;
///
/// // It learnt from what the rules let through: rebuttals of a premise.
/// let model = TextClassifier::builtin();
/// let rebuttal = "There is no reason why disabled people should not be allowed to vote.";
/// assert!(model.score(rebuttal) > model.threshold());
/// assert!(model.score("Paris is the capital of France.") < model.threshold());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TextClassifier {
    weights: Vec<i8>,
    scale: f32,
    bias: f32,
    threshold: f32,
}

/// Why classifier weights could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassifierFormatError(&'static str);

impl fmt::Display for ClassifierFormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad text classifier weights: {}", self.0)
    }
}

impl std::error::Error for ClassifierFormatError {}

impl TextClassifier {
    /// The weights shipped with the crate, trained on every corpus file.
    ///
    /// ```
    /// let model = refusal_guard::text::TextClassifier::builtin();
    /// assert!(model.threshold().is_finite());
    /// ```
    pub fn builtin() -> &'static TextClassifier {
        static MODEL: OnceLock<TextClassifier> = OnceLock::new();
        MODEL.get_or_init(|| {
            TextClassifier::from_bytes(BUILTIN).expect("the shipped weights are well formed")
        })
    }

    /// Reads weights in the training script's format: the magic
    /// `RGTCLS01`, then little-endian `u32` bucket count (a power of two),
    /// `f32` scale, `f32` bias and `f32` threshold, then one `i8` weight
    /// per bucket (a weight is `i8 * scale`).
    ///
    /// ```
    /// use refusal_guard::text::TextClassifier;
    ///
    /// assert!(TextClassifier::from_bytes(b"not weights").is_err());
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<TextClassifier, ClassifierFormatError> {
        let rest = bytes
            .strip_prefix(MAGIC.as_slice())
            .ok_or(ClassifierFormatError("no RGTCLS01 header"))?;
        if rest.len() < 16 {
            return Err(ClassifierFormatError("header cut short"));
        }
        let word = |i: usize| [rest[i], rest[i + 1], rest[i + 2], rest[i + 3]];
        let buckets = u32::from_le_bytes(word(0)) as usize;
        let scale = f32::from_le_bytes(word(4));
        let bias = f32::from_le_bytes(word(8));
        let threshold = f32::from_le_bytes(word(12));
        if !buckets.is_power_of_two() {
            return Err(ClassifierFormatError("bucket count is not a power of two"));
        }
        if rest.len() - 16 != buckets {
            return Err(ClassifierFormatError(
                "weight count differs from bucket count",
            ));
        }
        if ![scale, bias, threshold].iter().all(|v| v.is_finite()) {
            return Err(ClassifierFormatError("non-finite parameter"));
        }
        Ok(TextClassifier {
            weights: rest[16..].iter().map(|&b| b as i8).collect(),
            scale,
            bias,
            threshold,
        })
    }

    /// The score (log-odds of a refusal) of an opening.
    ///
    /// ```
    /// let model = refusal_guard::text::TextClassifier::builtin();
    /// let s = model.score("Absolutely not.");
    /// assert!(s.is_finite());
    /// ```
    pub fn score(&self, opening: &str) -> f32 {
        let mask = self.weights.len() as u32 - 1;
        let mut sum: i32 = 0;
        for_each_feature(opening, |hash| {
            sum += self.weights[(hash & mask) as usize] as i32
        });
        self.bias + sum as f32 * self.scale
    }

    /// The score from which an opening reads as a refusal.
    ///
    /// ```
    /// let model = refusal_guard::text::TextClassifier::builtin();
    /// assert!(model.threshold() > -100.0);
    /// ```
    pub fn threshold(&self) -> f32 {
        self.threshold
    }

    /// Whether the opening reads as a refusal.
    pub(super) fn flags(&self, opening: &str) -> bool {
        self.score(opening) >= self.threshold
    }
}

/// The 32-bit FNV-1a hashes of the features of `opening`, in the order the
/// training script writes them. Exposed so that the script's features can
/// be checked against the crate's.
///
/// ```
/// let hashes = refusal_guard::text::feature_hashes("No.");
/// // "no" as a word, and as the word at position 0.
/// assert_eq!(hashes.len(), 2);
/// ```
pub fn feature_hashes(opening: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for_each_feature(opening, |h| out.push(h));
    out
}

const FNV_OFFSET: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

fn fnv(h: u32, bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ b as u32).wrapping_mul(FNV_PRIME))
}

/// The normalised words of `opening`, joined by single spaces with a space
/// at each end: `" i can't help "`.
fn normalise(opening: &str) -> String {
    let mut out = String::with_capacity(opening.len().min(1024) + 2);
    out.push(' ');
    let mut words = 0;
    let mut in_word = false;
    for c in opening.chars() {
        let mapped = match c {
            'A'..='Z' => Some(c.to_ascii_lowercase()),
            'a'..='z' => Some(c),
            '0'..='9' => Some('0'),
            '\'' | '\u{2019}' | '\u{2018}' if in_word => Some('\''),
            _ => None,
        };
        match mapped {
            Some(m) => {
                if !in_word {
                    if words == MAX_WORDS {
                        break;
                    }
                    words += 1;
                    in_word = true;
                }
                out.push(m);
            }
            None if in_word => {
                trim_apostrophes(&mut out);
                out.push(' ');
                in_word = false;
            }
            None => {}
        }
    }
    if in_word {
        trim_apostrophes(&mut out);
        out.push(' ');
    }
    out
}

/// Drops apostrophes that end the word being written (`dogs'`).
fn trim_apostrophes(out: &mut String) {
    while out.ends_with('\'') {
        out.pop();
    }
}

/// Calls `f` with the hash of each feature of `opening`.
fn for_each_feature(opening: &str, mut f: impl FnMut(u32)) {
    let joined = normalise(opening);
    let words: Vec<&str> = joined.split(' ').filter(|w| !w.is_empty()).collect();
    for (i, w) in words.iter().enumerate() {
        f(fnv(fnv(FNV_OFFSET, b"u"), w.as_bytes()));
        if i < 3 {
            f(fnv(fnv(FNV_OFFSET, &[b'p', b'0' + i as u8]), w.as_bytes()));
        }
        if let Some(next) = words.get(i + 1) {
            let h = fnv(fnv(FNV_OFFSET, b"b"), w.as_bytes());
            f(fnv(fnv(h, b" "), next.as_bytes()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_case_digits_and_apostrophes() {
        assert_eq!(normalise("I Can\u{2019}t, in 2024!"), " i can't in 0000 ");
        assert_eq!(normalise("dogs' toys"), " dogs toys ");
        assert_eq!(normalise("caf\u{e9} 'quoted'"), " caf quoted ");
        assert_eq!(normalise(""), " ");
    }

    #[test]
    fn fnv_matches_the_reference_values() {
        // FNV-1a 32 test vectors.
        assert_eq!(fnv(FNV_OFFSET, b""), 0x811c9dc5);
        assert_eq!(fnv(FNV_OFFSET, b"a"), 0xe40c292c);
        assert_eq!(fnv(FNV_OFFSET, b"foobar"), 0xbf9cf968);
    }

    #[test]
    fn rejects_malformed_weights() {
        let mut bytes = MAGIC.to_vec();
        bytes.extend(3u32.to_le_bytes());
        bytes.extend([0u8; 12]);
        bytes.extend([0u8; 3]);
        assert!(TextClassifier::from_bytes(&bytes).is_err());
        let mut ok = MAGIC.to_vec();
        ok.extend(4u32.to_le_bytes());
        ok.extend([0u8; 12]);
        ok.extend([1u8; 4]);
        assert!(TextClassifier::from_bytes(&ok).is_ok());
        assert!(TextClassifier::from_bytes(&ok[..ok.len() - 1]).is_err());
    }
}

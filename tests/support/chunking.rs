//! Cutting a body into chunks: at chosen positions, at random, or every way
//! the fixture tests try.

use bytes::Bytes;

/// Bodies at least this large are not cut at every position (too many
/// cases); they get [`RANDOM_CHUNKINGS_LARGE`] random chunkings instead.
pub const EVERY_SPLIT_LIMIT: usize = 64 * 1024;
/// Random chunkings for a body under [`EVERY_SPLIT_LIMIT`].
pub const RANDOM_CHUNKINGS_SMALL: usize = 24;
/// Random chunkings for a larger body.
pub const RANDOM_CHUNKINGS_LARGE: usize = 300;
/// The largest chunk of each random chunking, in turn: from byte-sized to
/// frame-sized pieces.
const MAX_CHUNK: [usize; 10] = [1, 2, 3, 7, 16, 17, 64, 256, 512, 1024];

/// Splits bytes into chunks at the given positions.
pub fn split_at(bytes: &Bytes, cuts: &[usize]) -> Vec<Bytes> {
    let mut chunks = Vec::new();
    let mut start = 0;
    for &cut in cuts {
        if cut > start && cut < bytes.len() {
            chunks.push(bytes.slice(start..cut));
            start = cut;
        }
    }
    chunks.push(bytes.slice(start..));
    chunks
}

/// A tiny deterministic PRNG (xorshift64*) for random chunkings.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    /// Random cut points, chunks of 1..=max bytes.
    pub fn cuts(&mut self, len: usize, max: usize) -> Vec<usize> {
        let mut cuts = Vec::new();
        let mut at = 0;
        while at < len {
            at += 1 + (self.next_u64() as usize % max);
            cuts.push(at);
        }
        cuts
    }
}

/// `rounds` random chunkings of `bytes`, seeded by its length, each with
/// chunks of at most one of the [`MAX_CHUNK`] sizes in turn.
pub fn random_chunkings(bytes: &Bytes, rounds: usize) -> Vec<Vec<Bytes>> {
    let mut rng = Rng::new(0x5eed ^ bytes.len() as u64);
    (0..rounds)
        .map(|round| {
            split_at(
                bytes,
                &rng.cuts(bytes.len(), MAX_CHUNK[round % MAX_CHUNK.len()]),
            )
        })
        .collect()
}

/// The whole body in one chunk, cut in two at every position (under
/// [`EVERY_SPLIT_LIMIT`]), and random chunkings.
pub fn every_chunking(bytes: &Bytes) -> Vec<Vec<Bytes>> {
    let mut all = vec![vec![bytes.clone()]];
    let rounds = if bytes.len() < EVERY_SPLIT_LIMIT {
        all.extend((1..bytes.len()).map(|cut| split_at(bytes, &[cut])));
        RANDOM_CHUNKINGS_SMALL
    } else {
        RANDOM_CHUNKINGS_LARGE
    };
    all.extend(random_chunkings(bytes, rounds));
    all
}

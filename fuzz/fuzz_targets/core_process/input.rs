//! Reading the fuzzer's bytes: every read succeeds, with zeros once the input is spent, so
//! that any prefix of an input is an input too (libFuzzer's mutations cut and splice).

/// A cursor over the input.
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// Up to `n` bytes (fewer when the input ends).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (b, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        b
    }
}

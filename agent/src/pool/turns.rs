//! The turns of the asks a node's hold turns away: how many tokens a round
//! serves, and how many lease periods after the hold each ask comes back
//! (see [`Pools::fill_then_hold`](super::Pools::fill_then_hold)).

use super::Entry;

/// The most lease periods an ask turned away by a hold is sent back after the
/// hold's end (the spacing of
/// [`Pools::fill_then_hold`](super::Pools::fill_then_hold)): it bounds how
/// long a filter keeps a denial once its key's demand has fallen (two
/// periods, 200 ms at the default `--lease-target-ms`).
pub const MAX_TURNS: u32 = 2;

impl Entry {
    /// A store answer starts a round: the tokens the last one served are how
    /// many the asks sent back at its end may want (a round that served none
    /// keeps the figure of the one before); `first`: the tokens the answer
    /// itself served.
    pub(super) fn new_round(&mut self, spacing_ns: u64, first: u32) {
        if self.served > 0 {
            self.last_served = self.served;
        }
        self.served = first;
        self.turned = 0;
        self.spacing_ns = spacing_ns;
    }

    /// How many spacings after the hold's end an ask wanting `want` tokens,
    /// turned away now, should come back: behind the tokens the asks turned
    /// away before it this round want, one spacing per round's worth (what
    /// the last round served, or this one if it served more: the first round
    /// has no last), at most [`MAX_TURNS`]; 0 without spacing.
    pub(super) fn turn_away(&mut self, want: u32) -> u32 {
        if self.spacing_ns == 0 {
            return 0;
        }
        let ahead = self.turned;
        self.turned = self.turned.saturating_add(want);
        let round = self.last_served.max(self.served).max(1);
        (ahead / round).min(MAX_TURNS)
    }
}

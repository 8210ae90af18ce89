//! The replay's random draws: fixed by its seed, so that a replay is repeatable.

/// splitmix64's next draw from `state`, its high half: the replay's draws, fixed by the seed.
pub(crate) fn splitmix(state: &mut u64) -> u32 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 32) as u32
}

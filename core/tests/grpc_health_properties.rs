//! The health probe's answer parser takes bytes from the network: no input makes it panic,
//! only one clean SERVING message is a good probe, and what it sends parses back.

use circuit_breaker_core::grpc::health::{judge, request, Health, MAX_SERVICE};
use proptest::prelude::*;

fn framed(msg: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(msg);
    out
}

proptest! {
    #[test]
    fn any_answer_is_judged_without_panicking(
        status in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..12)),
        body in proptest::collection::vec(any::<u8>(), 0..64),
        truncated in any::<bool>(),
    ) {
        let h = judge(status.as_deref(), &body, truncated);
        if h == Health::Serving {
            // Only an OK status with one whole, uncompressed message is SERVING.
            prop_assert_eq!(status.as_deref(), Some(&b"0"[..]));
            prop_assert!(!truncated);
            prop_assert_eq!(body[0], 0);
            let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
            prop_assert_eq!(len + 5, body.len());
        }
    }

    #[test]
    fn a_serving_message_with_unknown_fields_around_it_is_serving(
        before in proptest::collection::vec((2u64..100, any::<u32>()), 0..4),
        after in proptest::collection::vec((2u64..100, proptest::collection::vec(any::<u8>(), 0..8)), 0..4),
    ) {
        let mut msg = Vec::new();
        for (field, v) in &before {
            push_varint(&mut msg, field << 3);
            push_varint(&mut msg, u64::from(*v));
        }
        msg.extend_from_slice(&[0x08, 1]);
        for (field, bytes) in &after {
            push_varint(&mut msg, (field << 3) | 2);
            push_varint(&mut msg, bytes.len() as u64);
            msg.extend_from_slice(bytes);
        }
        prop_assert_eq!(judge(Some(b"0"), &framed(&msg), false), Health::Serving);
        // Any cut of it is no answer at all.
        let whole = framed(&msg);
        for cut in 0..whole.len() {
            prop_assert_eq!(judge(Some(b"0"), &whole[..cut], false), Health::Invalid);
        }
    }

    #[test]
    fn a_request_carries_its_service(service in "[a-zA-Z0-9._/-]{0,200}") {
        prop_assume!(service.len() <= MAX_SERVICE);
        let r = request(&service);
        prop_assert_eq!(r[0], 0);
        let len = u32::from_be_bytes([r[1], r[2], r[3], r[4]]) as usize;
        prop_assert_eq!(len + 5, r.len());
        if service.is_empty() {
            prop_assert_eq!(len, 0);
        } else {
            // The service's bytes end the message, after its key and length.
            prop_assert_eq!(r[5], 0x0a);
            prop_assert!(r.ends_with(service.as_bytes()));
        }
    }
}

fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

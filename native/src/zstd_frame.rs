//! Kafka's zstd codec: a batch's frame(s) decompressed in one call, with one
//! decompression context per thread, straight into the caller's buffer.
//!
//! Why not `zstd::stream::read::Decoder` + `read_to_end` (what `decompress` used
//! before): every batch then created (and freed) a fresh decompression context,
//! `read_to_end` zero-filled the spare capacity of the output as it grew it, and the
//! streaming decoder wrote each block into its own window buffer and copied it out.
//! On 100 B records (callgrind, docs/benchmarks/profile.md) that was 179 instructions
//! a record of `memset` and about 60 more of `memcpy`, on top of the decoding itself.
//!
//! Here `ZSTD_decompressBound` (zstd's experimental API: a walk over the frames'
//! headers, exact when a frame records its size, blocks x block size otherwise)
//! sizes the output, and `ZSTD_decompressDCtx` decodes every frame (concatenated and
//! skippable ones too) straight into the buffer's spare capacity, nothing zero-filled.
//! zstd checks what it is given (its frame checksum when the frame has one, the
//! declared content size), and never writes past the capacity handed to it.
//! A bound above `ONE_SHOT_MAX` (a hostile frame can claim a lot of output in a few
//! bytes) is left to the streaming decoder, which only grows the buffer as real
//! output arrives.

use std::cell::RefCell;

use zstd::zstd_safe::{self, DCtx};

/// The largest output reserved up front from the frames' own claims.
const ONE_SHOT_MAX: u64 = 64 << 20;

thread_local! {
    /// This thread's decompression context, reused batch after batch (about 160 KiB).
    static DCTX: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
}

/// What the one-shot path made of a batch's zstd payload.
pub(crate) enum Frames {
    /// Decompressed into `out[..n]` (and `out.len() == n`).
    Done(usize),
    /// Too large a claim, or no frame header to bound: decode it by streaming.
    NotHandled,
}

fn bad(what: impl std::fmt::Display) -> String {
    format!("bad zstd payload: {what}")
}

/// Decompress the zstd frame(s) `data` into `out` (cleared first).
pub(crate) fn decompress(data: &[u8], out: &mut Vec<u8>) -> Result<Frames, String> {
    if data.is_empty() {
        // No frame at all: zstd's one-shot call would say "0 bytes", the streaming
        // decoder (and the pure path) "incomplete frame" - keep that error.
        return Ok(Frames::NotHandled);
    }
    let bound = match zstd_safe::decompress_bound(data) {
        Ok(b) if b <= ONE_SHOT_MAX => b as usize,
        // Either a claim too large to reserve, or not even a frame header: the
        // streaming decoder names the problem (or decodes a large batch as it grows).
        _ => return Ok(Frames::NotHandled),
    };
    out.clear();
    out.reserve(bound);
    DCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        let ctx = match &mut *slot {
            Some(ctx) => ctx,
            None => slot.insert(
                DCtx::try_create()
                    .ok_or_else(|| bad("zstd could not allocate a decompression context"))?,
            ),
        };
        match ctx.decompress(out, data) {
            Ok(n) => Ok(Frames::Done(n)),
            Err(code) => {
                // Whatever state the failed frame left goes with it.
                *slot = None;
                Err(bad(zstd_safe::get_error_name(code)))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn sample(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| if i % 7 == 0 { (i / 7) as u8 } else { b'x' })
            .collect()
    }

    /// The streaming decoder `decompress` used before: the reference.
    fn reference(data: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut v = Vec::new();
        zstd::stream::read::Decoder::with_buffer(data)?.read_to_end(&mut v)?;
        Ok(v)
    }

    fn unsized_frame(data: &[u8], checksum: bool) -> Vec<u8> {
        // A streaming compressor that was not told the length: no content size.
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        enc.include_checksum(checksum).unwrap();
        enc.include_contentsize(false).unwrap();
        std::io::Write::write_all(&mut enc, data).unwrap();
        enc.finish().unwrap()
    }

    fn done(r: Result<Frames, String>) -> usize {
        match r {
            Ok(Frames::Done(n)) => n,
            Ok(Frames::NotHandled) => panic!("not handled"),
            Err(e) => panic!("error: {e}"),
        }
    }

    #[test]
    fn same_bytes_as_the_streaming_decoder() {
        for len in [0, 1, 1000, 131_072, 131_073, 700_000] {
            let data = sample(len);
            let sized = zstd::bulk::compress(&data, 3).unwrap();
            let mut two = sized.clone();
            two.extend_from_slice(&unsized_frame(&data, true));
            for f in [
                sized,
                unsized_frame(&data, false),
                unsized_frame(&data, true),
                two,
            ] {
                // a stale, longer buffer must not leak into the result
                let mut out = vec![0xAB; 2 << 20];
                let n = done(decompress(&f, &mut out));
                assert_eq!(out.len(), n);
                assert_eq!(out, reference(&f).unwrap());
            }
        }
    }

    #[test]
    fn damage_is_an_error_never_a_panic_and_the_context_recovers() {
        let data = sample(300_000);
        let f = unsized_frame(&data, true);
        let mut errors = 0;
        for at in (0..f.len()).step_by(7) {
            let mut g = f.clone();
            g[at] ^= 0x5A;
            match decompress(&g, &mut Vec::new()) {
                Err(e) => {
                    assert!(e.starts_with("bad zstd payload: "), "{e}");
                    errors += 1;
                }
                Ok(Frames::Done(n)) => {
                    // zstd took it (a flip it cannot see): the reference agrees
                    let mut out = Vec::new();
                    let _ = decompress(&g, &mut out);
                    assert_eq!(out.len(), n);
                    assert_eq!(out, reference(&g).unwrap());
                }
                // no frame header left to bound: the streaming decoder's to judge
                Ok(Frames::NotHandled) => {}
            }
            // the thread's context decodes a good frame after every bad one
            let mut out = Vec::new();
            assert_eq!(done(decompress(&f, &mut out)), data.len());
        }
        assert!(errors > f.len() / 14, "{errors} errors");
        for cut in (0..f.len()).step_by(97) {
            assert!(!matches!(
                decompress(&f[..cut], &mut Vec::new()),
                Ok(Frames::Done(_))
            ));
        }
    }

    #[test]
    fn a_huge_claim_is_left_to_the_streaming_decoder() {
        // A frame header claiming 1 TiB of content, then one empty last raw block.
        let mut f = zstd::bulk::compress(&[], 3).unwrap();
        // Rebuild: magic, FHD with an 8-byte content size, window byte absent (single
        // segment), FCS, then a last raw block of 0 bytes.
        f.clear();
        f.extend_from_slice(&0xFD2F_B528u32.to_le_bytes());
        f.push(0b1110_0000); // FCS flag 3 (8 bytes), single segment
        f.extend_from_slice(&(1u64 << 40).to_le_bytes());
        f.extend_from_slice(&[0x01, 0x00, 0x00]); // last block, raw, size 0
        assert!(matches!(
            decompress(&f, &mut Vec::new()),
            Ok(Frames::NotHandled)
        ));
        assert!(reference(&f).is_err());
    }
}

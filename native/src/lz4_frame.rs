//! Kafka's lz4 codec: one LZ4 frame per record batch, decompressed block by block
//! straight into the caller's buffer.
//!
//! Why not only `lz4_flex::frame::FrameDecoder`: as a `Read` it decompresses every
//! block into a buffer of its own and copies it out, and `read_to_end` zero-fills the
//! target as it grows it - two more passes over every decompressed byte, which at 1 KiB
//! values compressed 40 times was a measurable share of a Spark executor's Python
//! worker.  A batch's frame is whole in memory, so each block is decompressed at its
//! final place in `out`; `out` only grows (and is zero-filled) when a frame needs more
//! than any before it.
//!
//! The fast path takes the frames Kafka clients write (the Java producer's
//! `KafkaLZ4BlockOutputStream`, librdkafka, aiokafka via cramjam): independent blocks,
//! no dictionary.  Anything else (linked blocks, a dictionary id, the legacy format,
//! concatenated frames) is left to `FrameDecoder`, which stays the reference.  Every
//! checksum the frame declares is checked here as `FrameDecoder` would check it (the
//! frames librdkafka writes declare none: a Kafka batch has its own CRC-32C).
//!
//! Blocks are decoded by liblz4 (`decompress_block`), librdkafka's decoder: 278
//! instructions a 100 B record in a getmany drain against lz4_flex's 330
//! (docs/benchmarks/profile.md, issue 29).

use twox_hash::XxHash32;

const MAGIC: u32 = 0x184D_2204;
const FLG_VERSION_MASK: u8 = 0b1100_0000;
const FLG_VERSION_01: u8 = 0b0100_0000;
const FLG_INDEPENDENT_BLOCKS: u8 = 0b0010_0000;
const FLG_BLOCK_CHECKSUM: u8 = 0b0001_0000;
const FLG_CONTENT_SIZE: u8 = 0b0000_1000;
const FLG_CONTENT_CHECKSUM: u8 = 0b0000_0100;
const FLG_RESERVED: u8 = 0b0000_0010;
const FLG_DICT_ID: u8 = 0b0000_0001;
const BD_RESERVED: u8 = 0b1000_1111;
const BLOCK_UNCOMPRESSED: u32 = 0x8000_0000;

/// What the fast path made of a frame.
pub(crate) enum Frame {
    /// Decompressed into `out[..n]`.
    Done(usize),
    /// A frame shape the fast path does not take: decode it with `FrameDecoder`.
    NotHandled,
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn bad(what: impl std::fmt::Display) -> String {
    format!("bad lz4 payload: {what}")
}

/// One LZ4 block into the start of `out`; how many bytes it made.
///
/// liblz4's `LZ4_decompress_safe` (the `lz4-sys` crate, liblz4 1.10 compiled in), not
/// lz4_flex's block decoder: on 100 B text-like records it executes 288 instructions a
/// record against lz4_flex's 343 decoding the same blocks (callgrind; 278 against 330 in
/// a getmany drain, docs/benchmarks/profile.md).  It never reads past `block` nor writes
/// past `out` (its documented guarantee for malformed input); a negative result is an
/// error.
pub(crate) fn decompress_block(block: &[u8], out: &mut [u8]) -> Result<usize, String> {
    // Block sizes are checked against the frame's block maximum (at most 4 MiB) by the
    // caller, so both lengths fit an i32.
    let (src_len, dst_len) = match (i32::try_from(block.len()), i32::try_from(out.len())) {
        (Ok(s), Ok(d)) => (s, d),
        _ => return Err(bad("a block over 2 GiB")),
    };
    // SAFETY: both pointers are valid for the lengths given; LZ4_decompress_safe reads
    // at most `src_len` bytes and writes at most `dst_len` bytes, whatever the input.
    let made = unsafe {
        lz4_sys::LZ4_decompress_safe(
            block.as_ptr().cast(),
            out.as_mut_ptr().cast(),
            src_len,
            dst_len,
        )
    };
    if made < 0 {
        return Err(bad(format!(
            "a corrupt block of {} bytes (liblz4 error {made})",
            block.len()
        )));
    }
    Ok(made as usize)
}

/// Decompress the single LZ4 frame `data` into `out[..n]`.
///
/// `out.len()` is a high-water mark kept between calls (its bytes past `n` are stale):
/// the caller must use only `out[..n]`.
pub(crate) fn decompress(data: &[u8], out: &mut Vec<u8>) -> Result<Frame, String> {
    // Magic, FLG, BD, HC at least; anything shorter is FrameDecoder's error to name.
    if data.len() < 7 || le_u32(data, 0) != MAGIC {
        return Ok(Frame::NotHandled);
    }
    let flg = data[4];
    let bd = data[5];
    if flg & FLG_VERSION_MASK != FLG_VERSION_01
        || flg & FLG_RESERVED != 0
        || bd & BD_RESERVED != 0
        || flg & FLG_INDEPENDENT_BLOCKS == 0
        || flg & FLG_DICT_ID != 0
    {
        return Ok(Frame::NotHandled);
    }
    let block_max: usize = match bd >> 4 {
        4 => 64 << 10,
        5 => 256 << 10,
        6 => 1 << 20,
        7 => 4 << 20,
        _ => return Ok(Frame::NotHandled),
    };
    let mut pos = 6;
    let mut content_size = None;
    if flg & FLG_CONTENT_SIZE != 0 {
        if data.len() < pos + 8 + 1 {
            return Err(bad("truncated frame descriptor"));
        }
        let mut size = [0u8; 8];
        size.copy_from_slice(&data[pos..pos + 8]);
        content_size = Some(u64::from_le_bytes(size));
        pos += 8;
    }
    let hc = (XxHash32::oneshot(0, &data[4..pos]) >> 8) as u8;
    if data[pos] != hc {
        return Err(bad("frame descriptor checksum mismatch"));
    }
    pos += 1;
    let mut n = 0usize;
    loop {
        if data.len() - pos < 4 {
            return Err(bad("truncated: a block size needs 4 bytes"));
        }
        let word = le_u32(data, pos);
        pos += 4;
        if word == 0 {
            break; // end mark
        }
        let size = (word & !BLOCK_UNCOMPRESSED) as usize;
        if size > block_max {
            return Err(bad(format!("a block of {size} bytes in a frame of {block_max}-byte blocks")));
        }
        if data.len() - pos < size {
            return Err(bad(format!("truncated: a block of {size} bytes, {} left", data.len() - pos)));
        }
        let block = &data[pos..pos + size];
        pos += size;
        if flg & FLG_BLOCK_CHECKSUM != 0 {
            if data.len() - pos < 4 {
                return Err(bad("truncated: a block checksum needs 4 bytes"));
            }
            if le_u32(data, pos) != XxHash32::oneshot(0, block) {
                return Err(bad("block checksum mismatch"));
            }
            pos += 4;
        }
        if out.len() < n + block_max {
            out.resize(n + block_max, 0);
        }
        if word & BLOCK_UNCOMPRESSED != 0 {
            out[n..n + size].copy_from_slice(block);
            n += size;
        } else {
            n += decompress_block(block, &mut out[n..n + block_max])?;
        }
    }
    if flg & FLG_CONTENT_CHECKSUM != 0 {
        if data.len() - pos < 4 {
            return Err(bad("truncated: the content checksum needs 4 bytes"));
        }
        if le_u32(data, pos) != XxHash32::oneshot(0, &out[..n]) {
            return Err(bad("content checksum mismatch"));
        }
        pos += 4;
    }
    if let Some(size) = content_size {
        if size != n as u64 {
            return Err(bad(format!("the frame declares {size} bytes, its blocks hold {n}")));
        }
    }
    if pos != data.len() {
        // More after the frame (another frame, or a skippable one): FrameDecoder's job.
        return Ok(Frame::NotHandled);
    }
    Ok(Frame::Done(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lz4_flex::frame::{BlockMode, BlockSize, FrameDecoder, FrameEncoder, FrameInfo};
    use std::io::{Read, Write};

    fn frame(data: &[u8], info: &FrameInfo) -> Vec<u8> {
        let mut enc = FrameEncoder::with_frame_info(info.clone(), Vec::new());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    fn reference(data: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        FrameDecoder::new(data).read_to_end(&mut v).unwrap();
        v
    }

    fn sample(len: usize) -> Vec<u8> {
        (0..len).map(|i| if i % 7 == 0 { (i / 7) as u8 } else { b'x' }).collect()
    }

    /// (info, has block checksums) for every independent-block shape, sized for `len`.
    fn shapes(len: usize) -> Vec<(FrameInfo, bool)> {
        let mut v = Vec::new();
        for size in [BlockSize::Max64KB, BlockSize::Max256KB, BlockSize::Max1MB] {
            for (block_sums, content_sum, sized) in
                [(false, false, false), (true, false, false), (true, true, true)]
            {
                let info = FrameInfo::new()
                    .block_size(size)
                    .block_mode(BlockMode::Independent)
                    .block_checksums(block_sums)
                    .content_checksum(content_sum)
                    .content_size(sized.then_some(len as u64));
                v.push((info, block_sums));
            }
        }
        v
    }

    fn done(r: Result<Frame, String>) -> usize {
        match r {
            Ok(Frame::Done(n)) => n,
            Ok(Frame::NotHandled) => panic!("frame not handled"),
            Err(e) => panic!("error: {e}"),
        }
    }

    #[test]
    fn same_bytes_as_frame_decoder() {
        for len in [0, 1, 65_535, 65_536, 65_537, 700_000] {
            let data = sample(len);
            for (info, _) in shapes(len) {
                let f = frame(&data, &info);
                // a stale, longer high-water mark must not leak into the result
                let mut out = vec![0xAB; 3 << 20];
                let n = done(decompress(&f, &mut out));
                assert_eq!(&out[..n], &data[..]);
                assert_eq!(&out[..n], &reference(&f)[..]);
            }
        }
    }

    #[test]
    fn linked_blocks_and_trailing_bytes_are_left_to_frame_decoder() {
        let linked = frame(&sample(200_000), &FrameInfo::new().block_mode(BlockMode::Linked));
        assert!(matches!(decompress(&linked, &mut Vec::new()), Ok(Frame::NotHandled)));
        let (info, _) = shapes(1000).remove(0);
        let mut two = frame(&sample(1000), &info);
        two.extend_from_slice(&two.clone());
        assert!(matches!(decompress(&two, &mut Vec::new()), Ok(Frame::NotHandled)));
    }

    #[test]
    fn damage_is_an_error_never_a_panic() {
        let data = sample(150_000);
        for (info, block_sums) in shapes(data.len()) {
            let f = frame(&data, &info);
            for cut in (0..f.len()).step_by(13) {
                let _ = decompress(&f[..cut], &mut Vec::new());
            }
            let mut errors = 0;
            for at in (4..64).chain((64..f.len()).step_by(11)) {
                let mut g = f.clone();
                g[at] ^= 0x5A;
                match decompress(&g, &mut Vec::new()) {
                    Err(_) => errors += 1,
                    Ok(Frame::Done(_)) if block_sums => {
                        panic!("a byte flipped at {at} passed the checksums")
                    }
                    Ok(_) => {}
                }
            }
            assert!(errors > 0);
        }
    }

    #[test]
    fn checksums_are_checked() {
        let data = sample(100_000);
        let (info, _) = shapes(data.len()).remove(2); // block + content checksums, sized
        let f = frame(&data, &info);
        let header = 7 + 8; // magic, FLG, BD, content size, HC
        let first_block_sum = header + 4 + (le_u32(&f, header) & !BLOCK_UNCOMPRESSED) as usize;
        let mut g = f.clone();
        g[first_block_sum] ^= 1;
        assert!(decompress(&g, &mut Vec::new()).err().unwrap().contains("block checksum"));
        let mut g = f.clone();
        let last = g.len() - 1;
        g[last] ^= 1;
        assert!(decompress(&g, &mut Vec::new()).err().unwrap().contains("content checksum"));
        let mut g = f.clone();
        g[6] ^= 1;
        assert!(decompress(&g, &mut Vec::new()).err().unwrap().contains("descriptor"));
    }
}

#[cfg(test)]
mod bench {
    //! `LZ4CPU_FRAME=path cargo test --release bench_ -- --ignored --nocapture`
    use super::*;

    fn blocks(f: &[u8]) -> Vec<(&[u8], bool)> {
        let mut pos = 7;
        let mut v = Vec::new();
        loop {
            let word = le_u32(f, pos);
            pos += 4;
            if word == 0 {
                return v;
            }
            let size = (word & !BLOCK_UNCOMPRESSED) as usize;
            v.push((&f[pos..pos + size], word & BLOCK_UNCOMPRESSED != 0));
            pos += size;
        }
    }

    #[test]
    #[ignore]
    fn bench_block_decoders() {
        let f = std::fs::read(std::env::var("LZ4CPU_FRAME").unwrap()).unwrap();
        let which = std::env::var("LZ4CPU_WHICH").unwrap_or_default();
        let reps: usize = std::env::var("LZ4CPU_REPS").map(|r| r.parse().unwrap()).unwrap_or(200);
        let bs = blocks(&f);
        let mut out = vec![0u8; 64 << 10];
        let mut total = 0usize;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            for (b, raw) in &bs {
                assert!(!raw);
                total += if which == "sys" {
                    let n = unsafe {
                        lz4_sys::LZ4_decompress_safe(
                            b.as_ptr().cast(),
                            out.as_mut_ptr().cast(),
                            b.len() as i32,
                            out.len() as i32,
                        )
                    };
                    assert!(n >= 0);
                    n as usize
                } else {
                    lz4_flex::block::decompress_into(b, &mut out).unwrap()
                };
            }
        }
        let el = t.elapsed();
        eprintln!(
            "{which}: {} MB out, {:.2} GB/s",
            total / 1_000_000,
            total as f64 / el.as_secs_f64() / 1e9
        );
    }
}

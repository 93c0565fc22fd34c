//! The images `cuModuleLoadData` accepts ([`load_image`]): a fatbin container (what
//! `nvcc -fatbin` writes and warpnorm embeds), a `__fatBinC_Wrapper_t` pointing at one, or
//! NUL-terminated PTX text; and which PTX of a fatbin runs ([`select_ptx`]).
//!
//! Fatbin layout (little-endian, as nvcc 12.x/13.x writes it; not documented by NVIDIA):
//!
//! - header, 16 bytes: `u32` magic `0xBA55ED50`, `u16` version, `u16` header size, `u64` size
//!   of the entries that follow the header;
//! - entries, each a header and a payload:
//!   - `u16` kind (1 = PTX, 2 = ELF/SASS), `u16` version, `u32` entry header size, `u64`
//!     payload size (padded);
//!   - at byte 16 a `u32` compressed size (0 when not compressed), at 28 the `u32`
//!     architecture (75, 80, ..., 120), at 40 the `u64` flags, at 56 the `u64` uncompressed
//!     size; the rest (object name, options) is not needed here.
//!
//! Flag `0x8000` marks a zstd-compressed payload (nvcc 12.4 and later compress by default,
//! PTX included); `0x2000` the LZ4 compression of older toolkits, which is not supported.
//! Decompressed PTX is NUL-terminated text.

use std::ffi::{c_char, c_void, CStr};

use crate::consts::*;

pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// Magic of `__fatBinC_Wrapper_t` (`{ i32 magic; i32 version; const u64 *data; void *x; }`).
pub const WRAPPER_MAGIC: u32 = 0x4662_43B1;

const KIND_PTX: u16 = 1;
const KIND_ELF: u16 = 2;
const FLAG_COMPRESSED_LZ4: u64 = 0x2000;
const FLAG_COMPRESSED_ZSTD: u64 = 0x8000;
/// Largest fatbin accepted (a sanity bound on a size read from memory).
const MAX_FATBIN: u64 = 4 << 30;
/// Largest decompressed entry accepted.
const MAX_ENTRY: u64 = 1 << 31;

/// Why an image cannot be loaded: the driver's result code and a message for stderr.
#[derive(Debug)]
pub struct LoadError {
    pub code: CUresult,
    pub message: String,
}

fn err(code: CUresult, message: impl Into<String>) -> LoadError {
    LoadError {
        code,
        message: message.into(),
    }
}

/// One entry of a fatbin.
#[derive(Debug)]
pub struct Entry<'a> {
    pub kind: u16,
    pub arch: u32,
    pub flags: u64,
    compressed_size: u32,
    uncompressed_size: u64,
    payload: &'a [u8],
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

/// Total length in bytes of the fatbin whose first 16 bytes are `header`.
pub fn fatbin_len(header: &[u8; 16]) -> Result<usize, LoadError> {
    if u32_at(header, 0) != FATBIN_MAGIC {
        return Err(err(CUDA_ERROR_INVALID_IMAGE, "not a fatbin (bad magic)"));
    }
    let header_size = u16_at(header, 6) as u64;
    let fat_size = u64_at(header, 8);
    if header_size < 16 || fat_size > MAX_FATBIN {
        return Err(err(
            CUDA_ERROR_INVALID_IMAGE,
            format!("fatbin header size {header_size} / body size {fat_size} out of range"),
        ));
    }
    Ok((header_size + fat_size) as usize)
}

/// The entries of a whole fatbin (header included).
pub fn entries(data: &[u8]) -> Result<Vec<Entry<'_>>, LoadError> {
    if data.len() < 16 {
        return Err(err(
            CUDA_ERROR_INVALID_IMAGE,
            "fatbin shorter than its header",
        ));
    }
    let total = fatbin_len(data[..16].try_into().unwrap())?;
    if total > data.len() {
        return Err(err(CUDA_ERROR_INVALID_IMAGE, "fatbin truncated"));
    }
    let mut off = u16_at(data, 6) as usize;
    let mut out = Vec::new();
    while off < total {
        let bad = |what: &str| {
            err(
                CUDA_ERROR_INVALID_IMAGE,
                format!("fatbin entry at byte {off}: {what}"),
            )
        };
        if off + 64 > total {
            return Err(bad("truncated entry header"));
        }
        let header_size = u32_at(data, off + 4) as usize;
        let payload_size = u64_at(data, off + 8);
        if header_size < 64 || header_size > total - off {
            return Err(bad("header size out of range"));
        }
        let start = off + header_size;
        if payload_size > (total - start) as u64 {
            return Err(bad("payload size out of range"));
        }
        let end = start + payload_size as usize;
        out.push(Entry {
            kind: u16_at(data, off),
            arch: u32_at(data, off + 28),
            flags: u64_at(data, off + 40),
            compressed_size: u32_at(data, off + 16),
            uncompressed_size: u64_at(data, off + 56),
            payload: &data[start..end],
        });
        off = end;
    }
    Ok(out)
}

impl Entry<'_> {
    /// The payload, decompressed when it is compressed.
    pub fn contents(&self) -> Result<Vec<u8>, LoadError> {
        if self.flags & FLAG_COMPRESSED_ZSTD != 0 {
            let n = match self.compressed_size as usize {
                0 => self.payload.len(),
                n if n <= self.payload.len() => n,
                _ => {
                    return Err(err(
                        CUDA_ERROR_INVALID_IMAGE,
                        "compressed size larger than the payload",
                    ))
                }
            };
            if self.uncompressed_size > MAX_ENTRY {
                return Err(err(
                    CUDA_ERROR_INVALID_IMAGE,
                    "uncompressed size out of range",
                ));
            }
            let mut out = Vec::with_capacity(self.uncompressed_size as usize);
            ruzstd::decoding::FrameDecoder::new()
                .decode_all_to_vec(&self.payload[..n], &mut out)
                .map_err(|e| {
                    err(
                        CUDA_ERROR_INVALID_IMAGE,
                        format!("zstd decompression of a fatbin entry failed: {e}"),
                    )
                })?;
            if out.len() as u64 != self.uncompressed_size {
                return Err(err(
                    CUDA_ERROR_INVALID_IMAGE,
                    format!(
                        "fatbin entry decompressed to {} bytes, header says {}",
                        out.len(),
                        self.uncompressed_size
                    ),
                ));
            }
            Ok(out)
        } else if self.flags & FLAG_COMPRESSED_LZ4 != 0 {
            Err(err(
                CUDA_ERROR_INVALID_IMAGE,
                "LZ4-compressed fatbin entries (older nvcc with -Xfatbin -compress-all) are not supported by simcuda",
            ))
        } else {
            Ok(self.payload.to_vec())
        }
    }
}

/// PTX text chosen from an image, with the virtual architecture it targets.
#[derive(Debug)]
pub struct Ptx {
    pub text: String,
    /// `compute_XX` of the fatbin entry; 0 for plain PTX text.
    pub arch: u32,
}

/// PTX bytes (NUL-terminated or not) to text.
pub fn ptx_text(bytes: &[u8]) -> Result<String, LoadError> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8(bytes[..end].to_vec())
        .map_err(|_| err(CUDA_ERROR_INVALID_PTX, "PTX text is not valid UTF-8"))
}

/// The PTX to run, on a device of compute capability `arch`, from an image given to
/// `cuModuleLoadData`: a fatbin (see [`select_ptx`]), a `__fatBinC_Wrapper_t` pointing at one
/// (followed when `unwrap`), or NUL-terminated PTX text (`arch` 0 in the result). A cubin is
/// `CUDA_ERROR_NO_BINARY_FOR_GPU`: simcuda runs no SASS.
///
/// # Safety
/// `image` is null or points to one of those images, readable to its end (a fatbin to the
/// size its header gives, text to its NUL).
pub unsafe fn load_image(image: *const c_void, unwrap: bool, arch: u32) -> Result<Ptx, LoadError> {
    if image.is_null() {
        return Err(err(CUDA_ERROR_INVALID_VALUE, "null image"));
    }
    let p = image as *const u8;
    let magic = (p as *const u32).read_unaligned();
    if magic == WRAPPER_MAGIC && unwrap {
        let data = (p.add(8) as *const *const c_void).read_unaligned();
        return load_image(data, false, arch);
    }
    if magic == FATBIN_MAGIC {
        let header = (p as *const [u8; 16]).read_unaligned();
        let len = fatbin_len(&header)?;
        let data = std::slice::from_raw_parts(p, len);
        return select_ptx(data, arch);
    }
    if magic == u32::from_le_bytes(*b"\x7fELF") {
        return Err(err(
            CUDA_ERROR_NO_BINARY_FOR_GPU,
            "the image is a cubin (SASS): simcuda runs PTX only",
        ));
    }
    let text = ptx_text(CStr::from_ptr(p as *const c_char).to_bytes())?;
    Ok(Ptx { text, arch: 0 })
}

/// Chooses what to run from a fatbin on a device of compute capability `device_arch`
/// (`major * 10 + minor`, e.g. 120).
///
/// A real driver runs the SASS built for the device's architecture (an `sm_XY` entry of the
/// same major version and a minor version not above the device's), else JIT-compiles the
/// newest PTX whose virtual architecture is not above the device's. simcuda cannot run SASS,
/// and the code nvcc emits depends on the architecture (`__CUDA_ARCH__`; warpnorm's backward
/// LayerNorm kernels hold fewer elements per thread on 12.x, for one), so it runs PTX only
/// where that PTX is the code the real driver would run:
/// - when the driver would run SASS for `sm_XY`, the fatbin's `compute_XY` PTX (the same
///   source compiled for the same architecture), else `CUDA_ERROR_NO_BINARY_FOR_GPU` with a
///   message naming the PTX architectures there are (run with `SIMCUDA_COMPUTE_CAP` set to
///   one of them);
/// - when it would JIT PTX, that PTX.
pub fn select_ptx(data: &[u8], device_arch: u32) -> Result<Ptx, LoadError> {
    let entries = entries(data)?;
    let describe = || {
        entries
            .iter()
            .map(|e| match e.kind {
                KIND_PTX => format!("compute_{} PTX", e.arch),
                KIND_ELF => format!("sm_{} SASS", e.arch),
                k => format!("kind {k} arch {}", e.arch),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (major, minor) = (device_arch / 10, device_arch % 10);
    let sass = entries
        .iter()
        .filter(|e| e.kind == KIND_ELF && e.arch / 10 == major && e.arch % 10 <= minor)
        .map(|e| e.arch)
        .max();
    let chosen = match sass {
        Some(arch) => entries
            .iter()
            .find(|e| e.kind == KIND_PTX && e.arch == arch)
            .ok_or_else(|| {
                err(
                    CUDA_ERROR_NO_BINARY_FOR_GPU,
                    format!(
                        "a compute capability {major}.{minor} GPU would run the sm_{arch} SASS of this \
                         fatbin ({}); simcuda runs PTX only and there is no compute_{arch} PTX to \
                         stand in for it (set SIMCUDA_COMPUTE_CAP to the architecture of a PTX entry)",
                        describe()
                    ),
                )
            })?,
        None => entries
            .iter()
            .filter(|e| e.kind == KIND_PTX && e.arch <= device_arch)
            .max_by_key(|e| e.arch)
            .ok_or_else(|| {
                err(
                    CUDA_ERROR_NO_BINARY_FOR_GPU,
                    format!(
                        "the fatbin holds {} - nothing a compute capability {major}.{minor} device can run",
                        describe()
                    ),
                )
            })?,
    };
    Ok(Ptx {
        text: ptx_text(&chosen.contents()?)?,
        arch: chosen.arch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zstd frame holding `data` in one raw (uncompressed) block, with its content size.
    fn zstd_raw_frame(data: &[u8]) -> Vec<u8> {
        assert!(data.len() < 1 << 16 && data.len() >= 256);
        let mut f = vec![0x28, 0xB5, 0x2F, 0xFD];
        // Frame header descriptor: single segment, 2-byte content size (stored as size - 256).
        f.push(0b0110_0000);
        f.extend_from_slice(&((data.len() - 256) as u16).to_le_bytes());
        // Block header: last block, raw, size.
        let bh = 1u32 | ((data.len() as u32) << 3);
        f.extend_from_slice(&bh.to_le_bytes()[..3]);
        f.extend_from_slice(data);
        f
    }

    fn entry(kind: u16, arch: u32, flags: u64, payload: &[u8], csize: u32, usize_: u64) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[0..2].copy_from_slice(&kind.to_le_bytes());
        h[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
        h[4..8].copy_from_slice(&64u32.to_le_bytes());
        let padded = payload.len().div_ceil(8) * 8;
        h[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
        h[16..20].copy_from_slice(&csize.to_le_bytes());
        h[28..32].copy_from_slice(&arch.to_le_bytes());
        h[40..48].copy_from_slice(&flags.to_le_bytes());
        h[56..64].copy_from_slice(&usize_.to_le_bytes());
        h.extend_from_slice(payload);
        h.resize(64 + padded, 0);
        h
    }

    fn fatbin(entries: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = entries.concat();
        let mut f = FATBIN_MAGIC.to_le_bytes().to_vec();
        f.extend_from_slice(&1u16.to_le_bytes());
        f.extend_from_slice(&16u16.to_le_bytes());
        f.extend_from_slice(&(body.len() as u64).to_le_bytes());
        f.extend_from_slice(&body);
        f
    }

    const PTX: &str = ".version 9.0\n.target sm_120\n.address_size 64\n// padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding padding\n";

    #[test]
    fn picks_the_newest_ptx_and_decompresses_zstd() {
        let mut text = PTX.as_bytes().to_vec();
        text.push(0);
        let z = zstd_raw_frame(&text);
        let old = b".version 8.0\n.target sm_75\n\0".to_vec();
        let f = fatbin(&[
            entry(KIND_ELF, 80, 0x11, b"\x7fELF....", 0, 0),
            entry(KIND_ELF, 120, 0x11, b"\x7fELF....", 0, 0),
            entry(KIND_PTX, 75, 0x11, &old, 0, 0),
            entry(KIND_PTX, 120, 0x8011, &z, z.len() as u32, text.len() as u64),
        ]);
        // sm_120 SASS: its compute_120 PTX stands in for it.
        let p = select_ptx(&f, 120).unwrap();
        assert_eq!(p.arch, 120);
        assert_eq!(p.text, PTX);
        assert_eq!(fatbin_len(f[..16].try_into().unwrap()).unwrap(), f.len());
        // 12.1 runs sm_120 SASS too.
        assert_eq!(select_ptx(&f, 121).unwrap().arch, 120);
        // No SASS for 8.9 or 9.0: the driver would JIT the newest PTX not above the device.
        assert_eq!(select_ptx(&f, 90).unwrap().arch, 75);
        // sm_80 SASS, but no compute_80 PTX: not emulated.
        let e = select_ptx(&f, 86).unwrap_err();
        assert_eq!(e.code, CUDA_ERROR_NO_BINARY_FOR_GPU);
        assert!(e.message.contains("sm_80 SASS"), "{}", e.message);
    }

    #[test]
    fn refuses_what_the_device_could_not_run() {
        let f = fatbin(&[
            entry(KIND_ELF, 90, 0x11, b"\x7fELF", 0, 0),
            entry(KIND_PTX, 90, 0x11, b".version 9.0\0", 0, 0),
        ]);
        let e = select_ptx(&f, 80).unwrap_err();
        assert_eq!(e.code, CUDA_ERROR_NO_BINARY_FOR_GPU, "{}", e.message);
        let f = fatbin(&[entry(KIND_ELF, 80, 0x11, b"\x7fELF", 0, 0)]);
        assert_eq!(
            select_ptx(&f, 80).unwrap_err().code,
            CUDA_ERROR_NO_BINARY_FOR_GPU
        );
        let f = fatbin(&[entry(KIND_PTX, 90, 0x11, b".version 9.0\0", 0, 0)]);
        assert_eq!(select_ptx(&f, 90).unwrap().arch, 90);
    }

    #[test]
    fn rejects_malformed_containers() {
        let mut f = fatbin(&[entry(KIND_PTX, 80, 0x11, b".version 9.0\0", 0, 0)]);
        f[8] = f[8].wrapping_add(8); // body size past the end
        assert!(entries(&f).is_err());
        let f = fatbin(&[entry(KIND_PTX, 80, 0x8011, b"not zstd", 8, 100)]);
        assert!(select_ptx(&f, 80).is_err());
        let f = fatbin(&[entry(KIND_PTX, 80, 0x2011, b"lz4", 3, 100)]);
        assert!(select_ptx(&f, 80).unwrap_err().message.contains("LZ4"));
    }
}

//! Stream capture and graphs: `cuStreamBeginCapture*`, `cuStreamEndCapture`,
//! `cuStreamIsCapturing`, `cuStreamGetCaptureInfo*`, `cuThreadExchangeStreamCaptureMode`,
//! `cuGraphInstantiate*`, `cuGraphUpload`, `cuGraphLaunch`, `cuGraphDestroy`,
//! `cuGraphExecDestroy`; and the rules every other export follows while a stream is captured.
//!
//! ## What is modelled
//!
//! - **Recording.** Between `cuStreamBeginCapture` and `cuStreamEndCapture`, the work enqueued
//!   on the capturing stream is recorded as nodes of a graph instead of running:
//!   `cuLaunchKernel` (checked at the call as an eager launch is; the parameter values are
//!   copied then, as the driver copies them into the kernel node), `cuMemcpy{HtoD,DtoH,DtoD}Async`,
//!   `cuMemsetD{8,16,32}Async`, `cuLaunchHostFunc`, and `cuGraphLaunch` of another executable
//!   graph (its nodes are appended). A copy from or to host memory records the host address;
//!   the host memory is read or written when the graph runs, as on the driver. `cuEventRecord`
//!   on the capturing stream makes the event a captured event of that sequence.
//! - **Replay.** `cuGraphInstantiateWithFlags` makes an executable graph of a graph's nodes;
//!   `cuGraphLaunch` runs them in the order they were recorded (a capture on one stream is a
//!   chain), each as its eager form would run, stopping at the first failure (a kernel fault
//!   is the context's sticky error, as after an eager launch). An executable graph keeps its
//!   nodes after its graph is destroyed.
//! - **Prohibited calls** (CUDA Programming Guide, "Prohibited and Unhandled Operations", and
//!   the `CUstreamCaptureMode` documentation). Each invalidates the capture sequence it
//!   conflicts with: later work on its stream fails with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`,
//!   `cuStreamIsCapturing` reports `CU_STREAM_CAPTURE_STATUS_INVALIDATED`, and
//!   `cuStreamEndCapture` ends the capture with that error and a null graph.
//!   - "Potentially unsafe" calls: `cuMemAlloc`, `cuMemFree` and the synchronous copies and
//!     memsets (`cuMemcpyHtoD`, `cuMemcpyDtoH`, `cuMemcpyDtoD`, `cuMemsetD*` without `Async`)
//!     return `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` when the calling thread is prohibited
//!     from them: its mode (`cuThreadExchangeStreamCaptureMode`, global by default) is global
//!     and it has a capture of its own not begun in relaxed mode, or another thread has one
//!     begun in global mode; or its mode is thread-local and it has a capture of its own not
//!     begun in relaxed mode. Relaxed mode prohibits nothing.
//!   - Synchronizing or querying a capturing stream (`cuStreamSynchronize`, `cuStreamQuery`):
//!     `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`; `cuCtxSynchronize` while any stream of the
//!     context is captured: the same, and every capture of the context is invalidated.
//!   - `cuEventQuery` / `cuEventSynchronize` of a captured event: `CUDA_ERROR_CAPTURED_EVENT`
//!     (the event's sequence, while under way, is invalidated); `cuEventElapsedTime` of one:
//!     `CUDA_ERROR_CAPTURED_EVENT`.
//!   - `cuStreamWaitEvent` on a capturing stream: an event captured in the same sequence is
//!     an ordinary in-graph dependency; one captured in another sequence is
//!     `CUDA_ERROR_STREAM_CAPTURE_MERGE`; one not captured (recorded outside capture, or never
//!     recorded) is `CUDA_ERROR_STREAM_CAPTURE_ISOLATION` unless `CU_EVENT_WAIT_EXTERNAL` is
//!     given (an external wait: nothing to wait for here, where all work is done at its call).
//!     `CU_EVENT_WAIT_EXTERNAL` outside capture is `CUDA_ERROR_INVALID_VALUE`.
//!   - The legacy stream (the null stream, `CU_STREAM_LEGACY`) while a blocking stream (one
//!     created without `CU_STREAM_NON_BLOCKING`) of the context is captured: any work or
//!     query on it is `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT` and invalidates those captures.
//!   - `cuStreamBeginCapture` on the legacy stream: `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`; on a
//!     stream already capturing: `CUDA_ERROR_ILLEGAL_STATE`. `cuStreamEndCapture` on a stream
//!     not capturing: `CUDA_ERROR_ILLEGAL_STATE`; from another thread than the one that began a
//!     global or thread-local capture: `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD` (the capture
//!     goes on).
//!   - `cuGraphInstantiateWithFlags`: unknown flags, or `CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH`
//!     with `..._AUTO_FREE_ON_LAUNCH` or with host nodes or host copies, are
//!     `CUDA_ERROR_INVALID_VALUE`; the other flags change nothing here.
//!
//! ## What is not modelled
//!
//! - Cross-stream capture: a stream joining a capture by waiting on a captured event, and so
//!   forks, joins and `CUDA_ERROR_STREAM_CAPTURE_UNJOINED` / `_UNMATCHED`. Such a wait returns
//!   `CUDA_ERROR_NOT_SUPPORTED` with a message (a real driver accepts it).
//! - Stream-ordered allocation in a graph (memory nodes): `cuMemAllocAsync` / `cuMemFreeAsync`
//!   on a capturing stream return `CUDA_ERROR_NOT_SUPPORTED` (the emulated device reports no
//!   memory pools, so cudarc never calls them on it).
//! - Explicit graph construction and editing (`cuGraphCreate`, `cuGraphAdd*Node`, node
//!   queries, `cuGraphExecUpdate`, `cuStreamBeginCaptureToGraph`), conditional nodes, device
//!   launch of graphs, user objects, and the per-thread-stream variants (`_ptsz`). The
//!   dependencies `cuStreamGetCaptureInfo_v2/_v3` return are the last node of the chain.
//! - Which other calls a real driver counts as "potentially unsafe" is not documented in full;
//!   only the ones above are rejected (module loading, stream and event creation, attribute
//!   queries are allowed during capture here).
//! - Destroying a capturing stream ends its capture (the graph is discarded).

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;

use ptxsim::{Arg, LaunchConfig};

use crate::consts::*;
use crate::error::error_name;
use crate::ffi::*;
use crate::state::{driver, Context};

/// One recorded operation of a graph.
#[derive(Clone, Debug)]
pub enum Node {
    /// A kernel launch: the function handle, its configuration and its parameter values.
    Kernel {
        function: usize,
        cfg: LaunchConfig,
        args: Vec<Arg>,
        /// `cuLaunchCooperativeKernel`: every block at once.
        cooperative: bool,
    },
    /// `n` bytes from host address `src` to `dst`.
    HtoD { dst: u64, src: usize, n: usize },
    /// `n` bytes from `src` to host address `dst`.
    DtoH { dst: usize, src: u64, n: usize },
    /// `n` bytes from `src` to `dst`.
    DtoD { dst: u64, src: u64, n: usize },
    /// `n` copies of `pattern` (1, 2 or 4 bytes) at `dst`.
    Memset {
        dst: u64,
        pattern: Vec<u8>,
        n: usize,
    },
    /// A host function and its argument.
    Host {
        f: unsafe extern "C" fn(*mut c_void),
        data: usize,
    },
}

impl Node {
    /// Whether the node touches host memory or runs on the host (which a device-launchable
    /// graph may not have).
    fn on_host(&self) -> bool {
        matches!(
            self,
            Node::HtoD { .. } | Node::DtoH { .. } | Node::Host { .. }
        )
    }
}

/// A capture sequence under way on one stream.
pub struct Capture {
    /// Its id (unique in the process, as `cuStreamGetCaptureInfo` reports it).
    pub id: u64,
    /// The handle of the graph being built (returned by `cuStreamEndCapture`).
    pub graph: usize,
    /// The `CUstreamCaptureMode` it was begun with.
    pub mode: i32,
    /// The thread that began it.
    pub thread: ThreadId,
    /// Whether a prohibited call invalidated it.
    pub invalidated: bool,
    /// The recorded nodes, in order.
    pub nodes: Vec<Node>,
    /// The last node's handle, for `cuStreamGetCaptureInfo_v2/_v3`'s dependency array.
    pub last: Box<[usize; 1]>,
}

impl Capture {
    /// An opaque handle for the node at `index` (only ever reported, never taken).
    fn node_handle(&self, index: usize) -> usize {
        self.graph + 0x1_0000 * (index + 1)
    }
}

static NEXT_CAPTURE_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The calling thread's `CUstreamCaptureMode` (`cuThreadExchangeStreamCaptureMode`).
    static THREAD_MODE: Cell<i32> = const { Cell::new(CAPTURE_MODE_GLOBAL) };
}

/// Whether `s` is the legacy stream (the null stream or `CU_STREAM_LEGACY`).
fn is_legacy(s: usize) -> bool {
    s == 0 || s == STREAM_LEGACY
}

impl Context {
    /// Invalidates the capture of stream `s` (if any) and says why.
    pub fn invalidate(&mut self, s: usize, why: &str, code: CUresult) -> CUresult {
        if let Some(cap) = self.captures.get_mut(&s) {
            if !cap.invalidated {
                say(format_args!(
                    "{why}: {} during stream capture; the capture sequence {} is invalidated",
                    error_name(code),
                    cap.id
                ));
            }
            cap.invalidated = true;
        }
        code
    }

    /// The check of work or a query on stream `s`: on the legacy stream while a blocking
    /// stream is captured, `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT` (those captures are
    /// invalidated).
    pub fn legacy_check(&mut self, s: usize, why: &str) -> CUresult {
        if !is_legacy(s) {
            return CUDA_SUCCESS;
        }
        let blocking: Vec<usize> = self
            .captures
            .keys()
            .copied()
            .filter(|k| self.blocking.contains(k) || *k == STREAM_PER_THREAD)
            .collect();
        for k in &blocking {
            self.invalidate(*k, why, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
        }
        if blocking.is_empty() {
            CUDA_SUCCESS
        } else {
            CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
        }
    }

    /// The check of a "potentially unsafe" call (an allocation, a free, a synchronous copy or
    /// memset): `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` when a capture prohibits it for the
    /// calling thread (see the module docs); those captures are invalidated.
    pub fn unsafe_call_check(&mut self, why: &str) -> CUresult {
        let me = std::thread::current().id();
        let thread_mode = THREAD_MODE.with(|m| m.get());
        let prohibiting: Vec<usize> = self
            .captures
            .iter()
            .filter(|(_, c)| {
                let own = c.thread == me && c.mode != CAPTURE_MODE_RELAXED;
                match thread_mode {
                    CAPTURE_MODE_GLOBAL => own || (c.thread != me && c.mode == CAPTURE_MODE_GLOBAL),
                    CAPTURE_MODE_THREAD_LOCAL => own,
                    _ => false,
                }
            })
            .map(|(k, _)| *k)
            .collect();
        for k in &prohibiting {
            self.invalidate(*k, why, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        if prohibiting.is_empty() {
            CUDA_SUCCESS
        } else {
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        }
    }

    /// Enqueues `node` on stream `s` (checked by the caller): recorded when `s` is captured
    /// (`CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` once its capture is invalidated), run now
    /// otherwise.
    ///
    /// # Safety
    /// Host addresses in `node` are valid for its copy (now, or whenever a graph holding it
    /// runs), as the driver API requires of its caller.
    pub unsafe fn submit(&mut self, s: usize, node: Node, why: &str) -> CUresult {
        check!(self.legacy_check(s, why));
        if let Some(cap) = self.captures.get_mut(&s) {
            if cap.invalidated {
                return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
            }
            cap.nodes.push(node);
            let h = cap.node_handle(cap.nodes.len() - 1);
            cap.last[0] = h;
            return CUDA_SUCCESS;
        }
        self.run(&node)
    }

    /// Runs one node now. A host function node is called with the driver locked: the driver
    /// API forbids it to make CUDA calls.
    ///
    /// # Safety
    /// As for [`Context::submit`].
    pub unsafe fn run(&mut self, node: &Node) -> CUresult {
        match node {
            Node::Kernel {
                function,
                cfg,
                args,
                cooperative,
            } => self.launch(*function, *cfg, args, *cooperative),
            Node::HtoD { dst, src, n } => {
                let bytes = std::slice::from_raw_parts(*src as *const u8, *n);
                self.write(
                    &format!("cuMemcpyHtoD of {n} bytes to {dst:#x}"),
                    *dst,
                    bytes,
                )
            }
            Node::DtoH { dst, src, n } => {
                match self.read(
                    &format!("cuMemcpyDtoH of {n} bytes from {src:#x}"),
                    *src,
                    *n,
                ) {
                    Ok(b) => {
                        std::ptr::copy_nonoverlapping(b.as_ptr(), *dst as *mut u8, *n);
                        CUDA_SUCCESS
                    }
                    Err(e) => e,
                }
            }
            Node::DtoD { dst, src, n } => {
                let what = format!("cuMemcpyDtoD of {n} bytes from {src:#x} to {dst:#x}");
                match self.read(&what, *src, *n) {
                    Ok(b) => self.write(&what, *dst, &b),
                    Err(e) => e,
                }
            }
            Node::Memset { dst, pattern, n } => {
                let bytes = pattern.repeat(*n);
                self.write(
                    &format!("cuMemset of {} bytes at {dst:#x}", bytes.len()),
                    *dst,
                    &bytes,
                )
            }
            Node::Host { f, data } => {
                f(*data as *mut c_void);
                CUDA_SUCCESS
            }
        }
    }
}

// ---- capture --------------------------------------------------------------------------

/// `cuStreamBeginCapture_v2`.
unsafe fn begin_capture(stream: Handle, mode: c_int) -> CUresult {
    let mut d = driver();
    ctx!(d);
    let graph = d.handle();
    let c = ctx!(d);
    let s = stream as usize;
    if !c.stream_ok(s) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if !(CAPTURE_MODE_GLOBAL..=CAPTURE_MODE_RELAXED).contains(&mode) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if is_legacy(s) {
        say("cuStreamBeginCapture on the legacy stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, as from the driver");
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if c.captures.contains_key(&s) {
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    let id = NEXT_CAPTURE_ID.fetch_add(1, Ordering::Relaxed);
    c.captures.insert(
        s,
        Capture {
            id,
            graph,
            mode,
            thread: std::thread::current().id(),
            invalidated: false,
            nodes: Vec::new(),
            last: Box::new([0]),
        },
    );
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2(stream: Handle, mode: c_int) -> CUresult {
    guard! { begin_capture(stream, mode) }
}

/// The CUDA 10.0 entry point, without a mode (global).
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture(stream: Handle) -> CUresult {
    guard! { begin_capture(stream, CAPTURE_MODE_GLOBAL) }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture(stream: Handle, graph: *mut Handle) -> CUresult {
    guard! {
        with_stream(stream, |c| {
            let s = stream as usize;
            if graph.is_null() {
                return CUDA_ERROR_INVALID_VALUE;
            }
            let Some(cap) = c.captures.get(&s) else {
                return CUDA_ERROR_ILLEGAL_STATE;
            };
            if cap.mode != CAPTURE_MODE_RELAXED && cap.thread != std::thread::current().id() {
                return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
            }
            let cap = c.captures.remove(&s).expect("present");
            if cap.invalidated {
                *graph = std::ptr::null_mut();
                return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
            }
            c.graphs.insert(cap.graph, cap.nodes.into());
            *graph = cap.graph as Handle;
            CUDA_SUCCESS
        })
    }
}

/// The capture status of stream `s` (`CUstreamCaptureStatus`), with its capture when there is
/// one; `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT` for the legacy stream while a blocking stream is
/// captured.
fn capture_status(c: &mut Context, s: usize) -> Result<(c_int, Option<&Capture>), CUresult> {
    if is_legacy(s) {
        let r = c.legacy_check(s, "cuStreamIsCapturing on the legacy stream");
        if r != CUDA_SUCCESS {
            return Err(r);
        }
    }
    Ok(match c.captures.get(&s) {
        None => (CAPTURE_STATUS_NONE, None),
        Some(cap) if cap.invalidated => (CAPTURE_STATUS_INVALIDATED, Some(cap)),
        Some(cap) => (CAPTURE_STATUS_ACTIVE, Some(cap)),
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(stream: Handle, status: *mut c_int) -> CUresult {
    guard! {
        with_stream(stream, |c| match capture_status(c, stream as usize) {
            Ok((st, _)) => out(status, st),
            Err(e) => e,
        })
    }
}

/// `cuStreamGetCaptureInfo*`: the status, and while a capture is active its id, graph and
/// dependencies (the last node, or none before the first).
unsafe fn capture_info(
    stream: Handle,
    status: *mut c_int,
    id: *mut u64,
    graph: *mut Handle,
    deps: *mut *const Handle,
    edges: *mut *const c_void,
    num_deps: *mut usize,
) -> CUresult {
    with_stream(stream, |c| {
        let (st, cap) = match capture_status(c, stream as usize) {
            Ok(v) => v,
            Err(e) => return e,
        };
        check!(out(status, st));
        let active = cap.filter(|_| st == CAPTURE_STATUS_ACTIVE);
        if !id.is_null() {
            *id = active.map_or(0, |c| c.id);
        }
        if !graph.is_null() {
            *graph = active.map_or(std::ptr::null_mut(), |c| c.graph as Handle);
        }
        let n = active.map_or(0, |c| usize::from(!c.nodes.is_empty()));
        if !deps.is_null() {
            *deps = match active {
                Some(c) if n > 0 => c.last.as_ptr() as *const Handle,
                _ => std::ptr::null(),
            };
        }
        if !edges.is_null() {
            // Null: every edge is a default edge.
            *edges = std::ptr::null();
        }
        if !num_deps.is_null() {
            *num_deps = n;
        }
        CUDA_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo(
    stream: Handle,
    status: *mut c_int,
    id: *mut u64,
) -> CUresult {
    guard! {
        if status.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        capture_info(stream, status, id, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut())
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v2(
    stream: Handle,
    status: *mut c_int,
    id: *mut u64,
    graph: *mut Handle,
    deps: *mut *const Handle,
    num_deps: *mut usize,
) -> CUresult {
    guard! {
        if status.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        capture_info(stream, status, id, graph, deps, std::ptr::null_mut(), num_deps)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v3(
    stream: Handle,
    status: *mut c_int,
    id: *mut u64,
    graph: *mut Handle,
    deps: *mut *const Handle,
    edges: *mut *const c_void,
    num_deps: *mut usize,
) -> CUresult {
    guard! {
        if status.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        capture_info(stream, status, id, graph, deps, edges, num_deps)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut c_int) -> CUresult {
    guard! {
        if mode.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let new = *mode;
        if !(CAPTURE_MODE_GLOBAL..=CAPTURE_MODE_RELAXED).contains(&new) {
            return CUDA_ERROR_INVALID_VALUE;
        }
        *mode = THREAD_MODE.with(|m| m.replace(new));
        CUDA_SUCCESS
    }
}

// ---- graphs ---------------------------------------------------------------------------

/// `cuGraphInstantiateWithFlags`.
unsafe fn instantiate(exec: *mut Handle, graph: Handle, flags: u64) -> CUresult {
    let mut d = driver();
    ctx!(d);
    let h = d.handle();
    let c = ctx!(d);
    if exec.is_null() || graph.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let known = GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH
        | GRAPH_INSTANTIATE_UPLOAD
        | GRAPH_INSTANTIATE_DEVICE_LAUNCH
        | GRAPH_INSTANTIATE_USE_NODE_PRIORITY;
    if flags & !known != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let Some(nodes) = c.graphs.get(&(graph as usize)) else {
        return CUDA_ERROR_INVALID_HANDLE;
    };
    if flags & GRAPH_INSTANTIATE_DEVICE_LAUNCH != 0
        && (flags & GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH != 0 || nodes.iter().any(Node::on_host))
    {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let nodes = nodes.clone();
    c.execs.insert(h, nodes);
    out(exec, h as Handle)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut Handle,
    graph: Handle,
    flags: c_ulonglong,
) -> CUresult {
    guard! { instantiate(exec, graph, flags) }
}

/// The pre-CUDA 12 entry point (error node and log buffer; nothing is logged here).
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate_v2(
    exec: *mut Handle,
    graph: Handle,
    error_node: *mut Handle,
    log: *mut c_char,
    log_size: usize,
) -> CUresult {
    guard! {
        if !error_node.is_null() {
            *error_node = std::ptr::null_mut();
        }
        if !log.is_null() && log_size > 0 {
            *log = 0;
        }
        instantiate(exec, graph, 0)
    }
}

/// The CUDA 10 entry point: the same as [`cuGraphInstantiate_v2`].
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate(
    exec: *mut Handle,
    graph: Handle,
    error_node: *mut Handle,
    log: *mut c_char,
    log_size: usize,
) -> CUresult {
    cuGraphInstantiate_v2(exec, graph, error_node, log, log_size)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphUpload(exec: Handle, stream: Handle) -> CUresult {
    guard! {
        with_stream(stream, |c| {
            check!(c.legacy_check(stream as usize, "cuGraphUpload on the legacy stream"));
            found(c.execs.contains_key(&(exec as usize)))
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(exec: Handle, stream: Handle) -> CUresult {
    guard! {
        let s = stream as usize;
        // Checked, and appended to a capture, under the lock; run node by node, so that a
        // host function node runs with the driver unlocked.
        let mut replay: Option<Arc<[Node]>> = None;
        check!(with_stream(stream, |c| {
            let Some(nodes) = c.execs.get(&(exec as usize)).cloned() else {
                return CUDA_ERROR_INVALID_HANDLE;
            };
            check!(c.legacy_check(s, "cuGraphLaunch on the legacy stream"));
            if let Some(cap) = c.captures.get_mut(&s) {
                if cap.invalidated {
                    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
                }
                cap.nodes.extend(nodes.iter().cloned());
                if !cap.nodes.is_empty() {
                    let h = cap.node_handle(cap.nodes.len() - 1);
                    cap.last[0] = h;
                }
                return CUDA_SUCCESS;
            }
            replay = Some(nodes);
            CUDA_SUCCESS
        }));
        for node in replay.iter().flat_map(|n| n.iter()) {
            match node {
                Node::Host { f, data } => f(*data as *mut c_void),
                n => check!(with_ctx(|c| c.run(n))),
            }
        }
        CUDA_SUCCESS
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphDestroy(graph: Handle) -> CUresult {
    guard! {
        with_ctx(|c| {
            if graph.is_null() {
                return CUDA_ERROR_INVALID_VALUE;
            }
            found(c.graphs.remove(&(graph as usize)).is_some())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: Handle) -> CUresult {
    guard! {
        with_ctx(|c| {
            if exec.is_null() {
                return CUDA_ERROR_INVALID_VALUE;
            }
            found(c.execs.remove(&(exec as usize)).is_some())
        })
    }
}

/// The flags of `cuStreamCreate` that this module reads: whether the stream is blocking.
pub fn note_stream_flags(c: &mut Context, s: usize, flags: c_uint) {
    if flags & STREAM_NON_BLOCKING == 0 {
        c.blocking.insert(s);
    }
}

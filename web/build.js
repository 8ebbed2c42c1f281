// build.js: the page's side of build_worker.js, which builds generated
// requests off the main thread. One request is built at a time (Run waits
// for its answer). The worker starts with the first build and lives on,
// with its caches, until a build is cancelled: it is then stopped, so that
// nothing goes on building what no one waits for, and the next build
// starts a new one.

let worker = null;
// The build waiting for its answer: { id, resolve, reject }, or null.
let pending = null;
let last_id = 0;

function build_failed(why) {
  return Object.assign(new Error(`the page could not build the request (${why})`), { code: 'build_failed' });
}

function start() {
  const w = new Worker(new URL('./build_worker.js', import.meta.url), { type: 'module' });
  w.addEventListener('message', ({ data }) => {
    if (!pending || data.id !== pending.id) return;
    const p = pending;
    pending = null;
    if (data.error !== undefined) p.reject(build_failed(data.error));
    else p.resolve(data);
  });
  // A script that did not load or an error the worker did not catch (out
  // of memory): this worker is done.
  w.addEventListener('error', (e) => {
    e.preventDefault();
    stop(build_failed(e.message || 'its worker did not start'));
  });
  return w;
}

// Ends the worker; the build waiting, if any, fails with reason.
function stop(reason) {
  worker?.terminate();
  worker = null;
  const p = pending;
  pending = null;
  p?.reject(reason);
}

// Asks build_worker.js for msg (see there). Resolves to its answer;
// rejects with an Error whose code is build_failed, or when signal aborts
// with signal.reason, the worker stopped.
export function build(msg, signal) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    try {
      worker ??= start();
    } catch (e) {
      reject(build_failed(e.message));
      return;
    }
    const on_abort = () => stop(signal.reason);
    signal.addEventListener('abort', on_abort, { once: true });
    const settle = (fn) => (v) => {
      signal.removeEventListener('abort', on_abort);
      fn(v);
    };
    pending = { id: ++last_id, resolve: settle(resolve), reject: settle(reject) };
    worker.postMessage({ ...msg, id: pending.id });
  });
}

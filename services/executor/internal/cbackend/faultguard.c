// The fault guard of clients' shared memory for C code. A client may
// truncate the object behind a region at any moment; touching a page of the
// mapping past the new end raises SIGBUS, which in a C backend would kill
// the executor (the Go runtime turns faults into panics only in Go code
// that asked for it). The handler below catches SIGBUS at an address inside
// a watched mapping, puts anonymous zero pages over the whole mapping
// (mmap MAP_FIXED) so that the faulting instruction and every later access
// succeed, and marks the mapping poisoned: the executor then fails the
// requests that used it. Every other SIGBUS goes to the handler installed
// before (the Go runtime's), with the same arguments, as if this one were
// not there.
//
// The table of watched mappings is read by the handler without locks:
// slots are published start last and withdrawn start first. A handler
// counts itself in flight from before it reads the table until its mmap is
// done, and unwatching waits until none is: the caller unmaps the range
// next, and zero pages put there after that would land on whatever the
// process mapped in its place (Go's heap metadata, another region).
//
// Only faults the kernel raised are absorbed: a SIGBUS sent by a process
// (kill, sigqueue) carries no fault address, whatever its siginfo says.

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GUARD_SLOTS 4096

typedef struct {
  _Atomic uintptr_t start;
  _Atomic uintptr_t len;
  _Atomic int poisoned;
} guard_slot;

static guard_slot slots[GUARD_SLOTS];
static _Atomic int high; /* slots below this index may be in use */
static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction previous;
static _Atomic int installed;
static _Atomic uint64_t absorbed;
static _Atomic int inflight; /* handlers between their table lookup and their mmap */

static void forward(int sig, siginfo_t* info, void* uctx) {
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction != NULL && (void*)previous.sa_sigaction != (void*)SIG_IGN) {
      previous.sa_sigaction(sig, info, uctx);
      return;
    }
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    return;
  }
  /* No handler before this one: the default action, taken when the
   * faulting instruction runs again on return. */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, NULL);
}

static void on_sigbus(int sig, siginfo_t* info, void* uctx) {
  int saved = errno;
  if (info == NULL || info->si_code <= 0 || info->si_code == SI_KERNEL) {
    forward(sig, info, uctx);
    errno = saved;
    return;
  }
  uintptr_t a = (uintptr_t)info->si_addr;
  int hit = 0;
  /* Sequentially consistent with nereid_guard_unwatch: either it sees this
   * handler in flight, or this handler sees the slot withdrawn. */
  atomic_fetch_add(&inflight, 1);
  int n = atomic_load(&high);
  for (int i = 0; i < n; i++) {
    uintptr_t s = atomic_load(&slots[i].start);
    if (s == 0 || a < s) continue;
    uintptr_t len = atomic_load(&slots[i].len);
    if (len == 0 || a - s >= len) continue;
    void* r = mmap((void*)s, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (r != MAP_FAILED) {
      atomic_store_explicit(&slots[i].poisoned, 1, memory_order_release);
      atomic_fetch_add_explicit(&absorbed, 1, memory_order_relaxed);
      hit = 1;
    }
    break;
  }
  atomic_fetch_sub(&inflight, 1);
  if (!hit) forward(sig, info, uctx);
  errno = saved;
}

/* nereid_guard_install installs the handler once; it returns 0 or errno.
 * SA_ONSTACK: the Go runtime requires it of every handler (Go threads
 * run signal handlers on their alternate stacks). */
int nereid_guard_install(void) {
  pthread_mutex_lock(&slots_mu);
  int err = 0;
  if (!atomic_load(&installed)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigfillset(&sa.sa_mask);
    /* previous is read before the handler goes in: glibc fills the old
     * action in only after the kernel has switched, and a fault elsewhere
     * in that window would find no handler to forward to. */
    if (sigaction(SIGBUS, NULL, &previous) != 0 || sigaction(SIGBUS, &sa, NULL) != 0) {
      err = errno;
    } else {
      atomic_store(&installed, 1);
    }
  }
  pthread_mutex_unlock(&slots_mu);
  return err;
}

int nereid_guard_installed(void) { return atomic_load(&installed); }

/* nereid_guard_watch adds a mapping; it returns its slot, or -1 when the
 * table is full. */
int nereid_guard_watch(uintptr_t start, uintptr_t len) {
  pthread_mutex_lock(&slots_mu);
  int slot = -1;
  for (int i = 0; i < GUARD_SLOTS; i++) {
    if (atomic_load(&slots[i].start) == 0 && atomic_load(&slots[i].len) == 0) {
      slot = i;
      break;
    }
  }
  if (slot >= 0) {
    atomic_store(&slots[slot].poisoned, 0);
    atomic_store_explicit(&slots[slot].len, len, memory_order_release);
    atomic_store_explicit(&slots[slot].start, start, memory_order_release);
    if (slot >= atomic_load(&high)) atomic_store_explicit(&high, slot + 1, memory_order_release);
  }
  pthread_mutex_unlock(&slots_mu);
  return slot;
}

/* nereid_guard_unwatch withdraws a mapping; once it returns, no handler
 * will put pages over it, and the caller may unmap it. The slot stays
 * taken (the lock held) until then, so a handler that read it cannot
 * find it reused with another mapping's length either. */
void nereid_guard_unwatch(int slot) {
  if (slot < 0 || slot >= GUARD_SLOTS) return;
  pthread_mutex_lock(&slots_mu);
  atomic_store(&slots[slot].start, 0);
  while (atomic_load(&inflight) != 0) sched_yield();
  atomic_store(&slots[slot].len, 0);
  pthread_mutex_unlock(&slots_mu);
}

int nereid_guard_poisoned(int slot) {
  if (slot < 0 || slot >= GUARD_SLOTS) return 0;
  return atomic_load_explicit(&slots[slot].poisoned, memory_order_acquire);
}

uint64_t nereid_guard_absorbed(void) { return atomic_load(&absorbed); }

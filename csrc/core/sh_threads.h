/*
 * stagehand core, threads: messages, notifiers, ports, round barriers and
 * the request queue of a worker pool.
 *
 * Plain C with no Lua in it, like stagehand.h: a C or C++ engine can link
 * these and drive its own worker threads. Everything here may be called
 * from any thread; each object guards itself with a mutex of its own.
 * Objects shared between threads are reference counted: *_ref adds one,
 * *_unref drops one and frees the object with the last. Threads and locks
 * are the system's own (POSIX threads, or Win32's: sh_platform.h); times
 * are milliseconds.
 *
 * Messages (sh_msg_*) are a value encoded for another thread: bytes, plus
 * references to ports and round barriers (each holds one count of the
 * object until the message is freed). What the bytes mean is the encoder's
 * business (the Lua binding, csrc/lua/).
 *
 * A notifier (sh_notify_*) is how other threads wake one waiting thread (a
 * game's main thread): signal bumps a generation count and makes a file
 * descriptor readable; wait blocks until the generation differs from one
 * the waiter saw, or until a timeout. An event loop can watch the
 * descriptor instead (clear makes it unreadable again).
 *
 * A port (sh_port_*) is a queue of messages between threads, in order. post
 * takes the message (SH_OK) or refuses it once the port is closed
 * (SH_ECLOSED, the caller keeps it). take returns the oldest message
 * without waiting: SH_OK, SH_EAGAIN when empty, SH_ECLOSED when closed.
 * wait blocks until take would not answer SH_EAGAIN, the timeout passes
 * (SH_ETIMEDOUT) or *stop turns non-zero (SH_ESTOPPED). Closing drops what
 * is queued. watch adds a notifier signalled at every post and at close.
 *
 * Round barriers (sh_rounds_*): participants meet in numbered rounds.
 * arrive counts one arrival at a round (each with the same count, the
 * number that completes it); with an op other than SH_OP_COUNT it brings
 * share_len numbers under its index (1..participants), combined by the last
 * arrival in index order, so every participant reads the same bits. poll
 * says whether the round is complete (SH_OK, result copied out), not yet
 * (SH_EAGAIN) or aborted (SH_ECLOSED); wait blocks like a port's. Every
 * arrival must leave once it has its answer: the round is forgotten when
 * all have.
 *
 * Work queues (sh_work_*) hold a worker pool's requests: queued by
 * priority (higher first), then in order of pushing. Workers (numbered by
 * add_worker) take the best request, blocking while none is queued or the
 * queue is paused; take answers SH_ECLOSED when the worker should exit (the
 * queue is closed, or the worker was retired). Every change a worker makes
 * (a request started, progress, a reply, its exit) is queued as an event
 * for the owning thread, which the notifier given at creation announces
 * (once until the owner has read them all; a start alone is not announced:
 * it is read with the next event). A push takes a lock of its own, not the
 * one workers take: requests wait in a small inbox until a worker, or the
 * owner's next call that reads the queue, files them.
 *
 * Gated dispatch, for an owner that ranks requests itself (stagehand's
 * priorities are Lua functions, read on the owner's thread): hold keeps a
 * request (its payload is the queue's from then on) in a slot it returns,
 * where no worker takes it; offer lists held requests, best first, and
 * replaces the last list: idle workers take from the front at once, busy
 * ones as they finish, each entry once, pushed requests going first. It
 * returns how many entries of the list it replaced were still held
 * (untaken), and offered how many of the current list are. drop takes a
 * held request back and frees it: SH_OK, or SH_ESTATE once a worker took
 * it (or it was dropped); held says whether slot still holds id. An entry
 * names a slot and the id held there, so
 * an entry whose slot was taken and filled again is passed over.
 */
#ifndef STAGEHAND_THREADS_H
#define STAGEHAND_THREADS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Statuses beyond stagehand.h's (SH_OK, SH_EINVAL, SH_ENOMEM, SH_ESTATE). */
enum { SH_EAGAIN = -4, SH_ECLOSED = -5, SH_ETIMEDOUT = -6, SH_ESTOPPED = -7 };

enum sh_ref_kind { SH_REF_PORT = 1, SH_REF_ROUNDS = 2 };

typedef struct sh_msg sh_msg;
typedef struct sh_notify sh_notify;
typedef struct sh_port sh_port;
typedef struct sh_rounds sh_rounds;
typedef struct sh_work sh_work;

sh_msg *sh_msg_new(void);
void sh_msg_free(sh_msg *m);
/* Empties m for another value: its bytes and references go (a buffer
 * grown past 4 KB too), and it is written again from the start. A worker
 * writes a reply into the message its request came in, so a request's one
 * allocation is made and freed on the owner's thread, and a worker
 * allocates nothing for a reply that fits. */
void sh_msg_clear(sh_msg *m);
int sh_msg_put(sh_msg *m, const void *p, size_t n);
/* Room for n more bytes at the end of m, for the caller to write: a
 * pointer to them, or NULL (m unchanged) without memory. (An encoder
 * writes a tag and a number of known size with no call per byte.) */
unsigned char *sh_msg_room(sh_msg *m, size_t n);
const unsigned char *sh_msg_data(const sh_msg *m, size_t *len);
/* Overwrites 4 bytes written earlier (a count known only at the end). */
int sh_msg_set_u32(sh_msg *m, size_t offset, uint32_t v);
/* Adds a reference (taking a count of obj); returns its index, or a status. */
int32_t sh_msg_add_ref(sh_msg *m, int kind, void *obj);
int32_t sh_msg_nrefs(const sh_msg *m);
void *sh_msg_ref(const sh_msg *m, int32_t i, int *kind);

sh_notify *sh_notify_new(void);
void sh_notify_ref(sh_notify *n);
void sh_notify_unref(sh_notify *n);
void sh_notify_signal(sh_notify *n);
uint64_t sh_notify_gen(sh_notify *n);
/* 1 once the generation differs from seen, 0 when timeout_ms passed first. */
int sh_notify_wait(sh_notify *n, uint64_t seen, double timeout_ms);
/* What an event loop watches: a file descriptor (a pipe's read end) on
 * POSIX, a SOCKET (one of a connected loopback pair) on Windows. */
intptr_t sh_notify_fd(const sh_notify *n);
void sh_notify_clear(sh_notify *n);

sh_port *sh_port_new(void);
/* A port's name, for the log (cut to SH_PORT_NAME_LEN - 1 bytes; "" for
 * none): set once, before the port is shared. */
#define SH_PORT_NAME_LEN 64
void sh_port_set_name(sh_port *p, const char *name);
const char *sh_port_name(const sh_port *p);
void sh_port_ref(sh_port *p);
void sh_port_unref(sh_port *p);
int sh_port_post(sh_port *p, sh_msg *m);
int sh_port_take(sh_port *p, sh_msg **out);
int sh_port_wait(sh_port *p, double timeout_ms, const int *stop);
void sh_port_close(sh_port *p);
int sh_port_closed(sh_port *p);
int32_t sh_port_count(sh_port *p);
int sh_port_watch(sh_port *p, sh_notify *n);
void sh_port_unwatch(sh_port *p, sh_notify *n);

enum { SH_OP_COUNT = 0, SH_OP_SUM = 1, SH_OP_MIN = 2, SH_OP_MAX = 3 };
sh_rounds *sh_rounds_new(int32_t participants, int32_t share_len);
void sh_rounds_ref(sh_rounds *b);
void sh_rounds_unref(sh_rounds *b);
int32_t sh_rounds_participants(const sh_rounds *b);
int32_t sh_rounds_share_len(const sh_rounds *b);
int sh_rounds_arrive(sh_rounds *b, double round, int32_t count, int op, int32_t index, const double *share);
int sh_rounds_poll(sh_rounds *b, double round, double *out);
int sh_rounds_wait(sh_rounds *b, double round, double *out, double timeout_ms, const int *stop);
void sh_rounds_leave(sh_rounds *b, double round);
void sh_rounds_abort(sh_rounds *b);
int sh_rounds_aborted(sh_rounds *b);
int sh_rounds_watch(sh_rounds *b, sh_notify *n);
void sh_rounds_unwatch(sh_rounds *b, sh_notify *n);

/* Events a work queue reports to its owner (sh_work_next_event). */
enum sh_work_event {
  SH_EV_STARTED = 1,  /* a worker took request id */
  SH_EV_PROGRESS = 2, /* a, b: done and total */
  SH_EV_DONE = 3,     /* msg: what the function returned */
  SH_EV_FAILED = 4,   /* msg: the error */
  SH_EV_EXITED = 5    /* worker `worker` exited (id: -1) */
};
sh_work *sh_work_new(sh_notify *owner);
void sh_work_ref(sh_work *w);
void sh_work_unref(sh_work *w);
int sh_work_push(sh_work *w, int64_t id, double priority, sh_msg *payload);
int sh_work_remove(sh_work *w, int64_t id);
int32_t sh_work_running_on(sh_work *w, int64_t id);
int sh_work_set_priority(sh_work *w, int64_t id, double priority);
int32_t sh_work_queued(sh_work *w);
int32_t sh_work_running(sh_work *w);
/* Writes up to cap queued ids (in queue order: best first); returns the count. */
int32_t sh_work_queued_ids(sh_work *w, int64_t *ids, int32_t cap);
void sh_work_pause(sh_work *w, int paused);
void sh_work_close(sh_work *w);
int sh_work_closed(sh_work *w);
int32_t sh_work_add_worker(sh_work *w);
int32_t sh_work_hold(sh_work *w, int64_t id, sh_msg *payload);
int sh_work_drop(sh_work *w, int32_t slot, int64_t id);
int32_t sh_work_offer(sh_work *w, const int32_t *slots, const int64_t *ids, int32_t n);
int32_t sh_work_offered(sh_work *w);
int sh_work_held(sh_work *w, int32_t slot, int64_t id);
/* Aborts a running request: its worker's stop flag is set (with retire,
 * the worker also exits once its function returns). Returns the worker,
 * or -1 when no worker runs id. */
int32_t sh_work_abort_running(sh_work *w, int64_t id, int retire);
/* Tells a worker to stop, for good: what it runs now and every request it
 * takes later start stopped (stopping() is true, its waits end at once),
 * so a stop made before its thread took its first request holds too; with
 * retire, it also exits once what it runs returns. */
int sh_work_stop_worker(sh_work *w, int32_t worker, int retire);
const int *sh_work_stop_flag(sh_work *w, int32_t worker);
int sh_work_retired(sh_work *w, int32_t worker);
int32_t sh_work_live_workers(sh_work *w);
/* A worker's side: take blocks for the next request (SH_OK with id and
 * payload, the caller frees it), or answers SH_ECLOSED: exit. */
int sh_work_take(sh_work *w, int32_t worker, int64_t *id, sh_msg **payload);
/* report queues an event for the owner (SH_OK: m is the owner's now). A
 * request's end (SH_EV_DONE, SH_EV_FAILED) is never dropped: without
 * memory to record it the worker waits until there is, as take does for a
 * start, unless the queue is closed. Progress without memory answers
 * SH_ENOMEM, and m stays the caller's. */
int sh_work_report(sh_work *w, int32_t worker, int64_t id, int event, sh_msg *m, double a, double b);
void sh_work_exited(sh_work *w, int32_t worker);
/* The owner's side: the oldest event (SH_OK) or SH_EAGAIN. */
int sh_work_next_event(sh_work *w, int64_t *id, int *event, int32_t *worker, sh_msg **m, double *a,
                       double *b);
/* Up to cap events at once, under one lock: how many (their fields in the
 * arrays given, each may be NULL but kinds), SH_OK-free. */
int32_t sh_work_next_events(sh_work *w, int32_t cap, int64_t *ids, int *kinds, int32_t *workers, sh_msg **msgs,
                            double *as, double *bs);
/* What a worker is doing, for the log: its request (or -1), and what it
 * waits on ("a port (0x...)", "port 'inbox'", "a round barrier", "a
 * sleep"; NULL or "" for nothing), since when (sh_now_ms). The text is
 * copied, cut to SH_WAITING_LEN - 1 bytes; sh_work_waiting writes it into
 * `what` (SH_WAITING_LEN bytes) and returns 1, or 0 while it waits on
 * nothing. */
#define SH_WAITING_LEN 96
int64_t sh_work_current(sh_work *w, int32_t worker);
void sh_work_set_waiting(sh_work *w, int32_t worker, const char *what);
int sh_work_waiting(sh_work *w, int32_t worker, char *what, double *since);

int sh_threads_default(void);

#ifdef __cplusplus
}
#endif

#endif

//! The executor: client coroutines (any `Future<Output = ()>`, `!Send` is fine) polled on
//! one thread in virtual time.
//!
//! The engine wakes a task directly (by id) when the verb, receive or sleep it waits for
//! completes, so the hot path needs no waker traffic. Futures that wake themselves through
//! their `Waker` (e.g. `yield_now`, or a channel between coroutines of one task) are resumed
//! after `client_poll_ns` of virtual time: a busy-poll loop advances the clock instead of
//! freezing it. A task woken through its waker by another task (a parked waiter woken by the
//! holder that released what it waits for) is ready at once, in the order of the wake-ups.
use super::engine::{Ev, NO_TASK, Notice};
use super::model::Ps;
use super::qp::WorldRef;
use remora_layouts::NodeId;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};

type Task<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// The self-wake list shared by every task's waker: the ids in the order of their first
/// wake since the executor last took the list, and whether the list is non-empty (read
/// without the lock, so that a run of events with nobody yielding never takes it).
struct WakeList {
    ids: Mutex<Vec<u32>>,
    any: AtomicBool,
}

struct ForeignWake {
    id: u32,
    /// This task is in `list.ids` (set and cleared under its lock).
    listed: AtomicBool,
    list: Arc<WakeList>,
}

impl Wake for ForeignWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        // Already listed: this wake-up is the pending one (the executor schedules one self-wake
        // per task per collection; a second entry would be dropped there).
        if self.listed.load(Ordering::Acquire) {
            return;
        }
        // On the thread running this executor (every wake-up of a simulation, in practice):
        // its own list, without a lock. A wake-up by another task (a parked waiter woken by
        // the holder that released what it waits for) runs it at this instant; a task's own
        // (a busy-poll loop) after `client_poll_ns`.
        if RUNNING.with(|r| r.get()) == Arc::as_ptr(&self.list) {
            if POLLING.with(|p| p.get()) != self.id {
                NOW.with_borrow_mut(|l| l.push(self.id));
                return;
            }
            self.listed.store(true, Ordering::Release);
            LOCAL.with_borrow_mut(|l| l.push(self.id));
            return;
        }
        if let Ok(mut q) = self.list.ids.lock()
            && !self.listed.load(Ordering::Relaxed)
        {
            self.listed.store(true, Ordering::Release);
            q.push(self.id);
            self.list.any.store(true, Ordering::Release);
        }
    }
}

thread_local! {
    /// The wake list of the executor running on this thread (null when none), and the tasks
    /// its wakers listed from this thread since it last took them, in order.
    static RUNNING: Cell<*const WakeList> = const { Cell::new(std::ptr::null()) };
    static LOCAL: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    /// The task being polled on this thread (`NO_TASK` between polls).
    static POLLING: Cell<u32> = const { Cell::new(NO_TASK) };
    /// Tasks woken by other tasks since the executor last took them: ready at once.
    static NOW: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// Makes an executor's wake list this thread's for one `run` (unless another run is
/// under way on it), and hands what is left of the thread's list back to the shared one
/// when the run ends, however it ends.
struct Running(Option<Arc<WakeList>>);

impl Running {
    fn enter(list: &Arc<WakeList>) -> Running {
        RUNNING.with(|r| {
            if r.get().is_null() {
                r.set(Arc::as_ptr(list));
                Running(Some(list.clone()))
            } else {
                Running(None)
            }
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let Some(list) = self.0.take() else { return };
        RUNNING.with(|r| r.set(std::ptr::null()));
        // Wake-ups by other tasks not yet taken: the next run schedules them.
        NOW.with_borrow_mut(|n| LOCAL.with_borrow_mut(|l| l.append(n)));
        LOCAL.with_borrow_mut(|l| {
            if l.is_empty() {
                return;
            }
            if let Ok(mut q) = list.ids.lock() {
                q.append(l);
                list.any.store(true, Ordering::Release);
            }
            l.clear();
        });
    }
}

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Every user task finished (or was stopped by a client crash).
    AllDone,
    /// Nothing left to happen: the remaining tasks wait for something that never comes.
    Idle,
    /// The virtual time limit was reached.
    TimeLimit,
}

pub(crate) struct Executor<'a> {
    tasks: Vec<Option<Task<'a>>>,
    wakers: Vec<Waker>,
    /// Each task's waker state (`wakers[i]` wraps `wake_state[i]`).
    wake_state: Vec<Arc<ForeignWake>>,
    user: Vec<bool>,
    frozen: Vec<bool>,
    /// Virtual time of each task's pending self-wake (see `run`).
    foreign_due: Vec<Ps>,
    foreign: Arc<WakeList>,
    /// The self-woken tasks being scheduled: swapped with `foreign`'s list so that neither
    /// loses its capacity (no allocation per wake-up).
    woken: Vec<u32>,
    pub user_live: usize,
}

impl Default for Executor<'_> {
    fn default() -> Self {
        Executor::new()
    }
}

impl<'a> Executor<'a> {
    pub fn new() -> Executor<'a> {
        Executor {
            tasks: Vec::new(),
            wakers: Vec::new(),
            wake_state: Vec::new(),
            user: Vec::new(),
            frozen: Vec::new(),
            foreign_due: Vec::new(),
            foreign: Arc::new(WakeList {
                ids: Mutex::new(Vec::new()),
                any: AtomicBool::new(false),
            }),
            woken: Vec::new(),
            user_live: 0,
        }
    }

    /// Adds task `id` (already registered with the world) and makes it ready.
    pub fn add(&mut self, w: &WorldRef, id: u32, fut: Task<'a>, user: bool) {
        let i = id as usize;
        while self.tasks.len() <= i {
            self.tasks.push(None);
            let wk = Arc::new(ForeignWake {
                id: self.wakers.len() as u32,
                listed: AtomicBool::new(false),
                list: self.foreign.clone(),
            });
            self.wakers.push(Waker::from(wk.clone()));
            self.wake_state.push(wk);
            self.user.push(false);
            self.frozen.push(false);
            self.foreign_due.push(0);
        }
        self.tasks[i] = Some(fut);
        self.user[i] = user;
        if user {
            self.user_live += 1;
        }
        w.borrow_mut().make_ready(id);
    }

    fn poll_task(&mut self, t: u32) {
        let i = t as usize;
        if i >= self.tasks.len() || self.frozen[i] {
            return;
        }
        let Some(f) = self.tasks[i].as_mut() else {
            return;
        };
        let mut cx = Context::from_waker(&self.wakers[i]);
        POLLING.with(|p| p.set(t));
        let done = f.as_mut().poll(&mut cx).is_ready();
        POLLING.with(|p| p.set(NO_TASK));
        if done {
            self.tasks[i] = None;
            if self.user[i] {
                self.user_live -= 1;
            }
        }
    }

    fn freeze(&mut self, t: u32) {
        let i = t as usize;
        if i < self.tasks.len() && !self.frozen[i] && self.tasks[i].is_some() {
            self.frozen[i] = true;
            if self.user[i] {
                self.user_live -= 1;
            }
        }
    }

    /// Tasks that have not finished (frozen ones included).
    pub fn unfinished_user(&self) -> usize {
        (0..self.tasks.len())
            .filter(|&i| self.user[i] && self.tasks[i].is_some())
            .count()
    }

    /// Runs until `limit` (virtual ps), until every user task is done (`until_done`), or until
    /// nothing is left to happen. `spawn_servers` starts the memory nodes' handler-thread tasks
    /// the engine asks for; `notices` does the handler work it queued (disconnects,
    /// recoveries), before any task runs.
    pub fn run(
        &mut self,
        w: &WorldRef,
        limit: Option<Ps>,
        until_done: bool,
        spawn_servers: &mut dyn FnMut(&mut Executor<'a>, NodeId, u32),
        notices: &mut dyn FnMut(Notice),
    ) -> Stop {
        let running = Running::enter(&self.foreign);
        loop {
            // Housekeeping the engine asked for: handler notices (a restarted node recovers
            // before it serves again), new handler threads, crashed clients.
            let (serve, stopped, notes) = {
                let mut wb = w.borrow_mut();
                (
                    std::mem::take(&mut wb.to_serve),
                    std::mem::take(&mut wb.stopped),
                    std::mem::take(&mut wb.notices),
                )
            };
            for n in notes {
                notices(n);
            }
            for (node, thread) in serve {
                spawn_servers(self, node, thread);
            }
            for t in stopped {
                self.freeze(t);
            }
            // Run every ready task.
            loop {
                let t = {
                    let mut wb = w.borrow_mut();
                    wb.current_task = NO_TASK;
                    match wb.ready.pop_front() {
                        Some(t) => {
                            wb.queued[t as usize] = false;
                            wb.current_task = t;
                            wb.stats.polls += 1;
                            t
                        }
                        None => break,
                    }
                };
                self.poll_task(t);
            }
            let mut wb = w.borrow_mut();
            wb.current_task = NO_TASK;
            let mut woken = std::mem::take(&mut self.woken);
            if self.foreign.any.load(Ordering::Acquire)
                && let Ok(mut q) = self.foreign.ids.lock()
            {
                std::mem::swap(&mut *q, &mut woken);
                self.foreign.any.store(false, Ordering::Relaxed);
                for &t in &woken {
                    self.wake_state[t as usize]
                        .listed
                        .store(false, Ordering::Release);
                }
            }
            // This thread's wake-ups come after the shared list's (those were made before
            // the run began, or on other threads).
            let own = running.0.is_some();
            LOCAL.with_borrow_mut(|l| {
                if !own {
                    return;
                }
                for &t in l.iter() {
                    self.wake_state[t as usize]
                        .listed
                        .store(false, Ordering::Release);
                }
                woken.append(l);
            });
            let at = wb.now + wb.tm.poll;
            for &t in &woken {
                // One pending self-wake per task: a task whose coroutines all yield (a joined
                // group of spinners) must not multiply its wake-ups within one instant.
                let due = &mut self.foreign_due[t as usize];
                if *due > wb.now {
                    continue;
                }
                *due = at;
                wb.schedule(at, Ev::Wake(t));
            }
            woken.clear();
            self.woken = woken;
            if own {
                NOW.with_borrow_mut(|l| {
                    for &t in l.iter() {
                        wb.make_ready(t);
                    }
                    l.clear();
                });
                if !wb.ready.is_empty() {
                    continue;
                }
            }
            if until_done && self.user_live == 0 {
                return Stop::AllDone;
            }
            if !wb.to_serve.is_empty() || !wb.stopped.is_empty() || !wb.notices.is_empty() {
                continue;
            }
            // Handle events until one makes a task ready.
            loop {
                let Some(t) = wb.next_time() else {
                    return Stop::Idle;
                };
                if let Some(l) = limit
                    && t > l
                {
                    wb.now = wb.now.max(l);
                    return Stop::TimeLimit;
                }
                wb.step();
                if !wb.ready.is_empty()
                    || !wb.to_serve.is_empty()
                    || !wb.stopped.is_empty()
                    || !wb.notices.is_empty()
                {
                    break;
                }
            }
        }
    }
}

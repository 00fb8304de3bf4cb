/* alarm.h - timers of the soft device's wires that fire without the owner
 * calling in (wire.h: "its timers"). An RNR retry or an ACK timeout is due
 * at a time; a program asleep on its completion channel must still see it
 * happen. One thread per process serves every alarm of every wire: at the
 * due time it runs the alarm's ring, which only wakes (an armed doorbell's
 * datagram, an eventfd), so the owner's next poll gives the wire the turn
 * that runs the retry. Nothing touches the device from that thread.
 *
 *   struct soft_alarm a = {.ring = wake_my_cq};
 *   soft_alarm_set(&a, now_ns() + 1280000);   // in 1.28 ms, unless set earlier
 *   soft_alarm_cancel(&a);                    // before a's memory goes
 *
 * The thread starts with the first alarm set (all signals blocked), and
 * again in a forked child that sets one; it ends once no wire uses alarms
 * (soft_alarm_use / soft_alarm_unuse, a wire's open and close) and none is
 * set, so a process that closed its devices keeps no thread of ours. */
#ifndef TBRT_SOFT_ALARM_H
#define TBRT_SOFT_ALARM_H

#include <stdbool.h>
#include <stdint.h>

struct soft_alarm {
    /* Runs on the alarm thread, under its lock: wake something and return
     * (never block, never call the device or soft_alarm_*). */
    void (*ring)(struct soft_alarm *a);
    /* the alarm thread's: when it is due (0: not set) and its list */
    uint64_t due_ns;
    struct soft_alarm *next;
};

/* Ring a at due_ns (now_ns() time) or earlier: an alarm already set to ring
 * sooner keeps its time. 0, or -errno when no thread could be started (then
 * the owner's own calls are the only turns, as before). */
int soft_alarm_set(struct soft_alarm *a, uint64_t due_ns);
/* Unset a: once this returns its ring is not running and will not run. */
void soft_alarm_cancel(struct soft_alarm *a);
/* A wire that may set alarms opened, or closed (its alarms cancelled). */
void soft_alarm_use(void);
void soft_alarm_unuse(void);

#endif

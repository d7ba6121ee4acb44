// Package liveness tells whether a relay's engine still turns: whether
// each of its loops (the claim loops, the settle loops, the heartbeat)
// comes round within a threshold, or one is stuck for good (a goroutine
// blocked forever, a deadlock, a call without a deadline that never
// returns) and only a restart would help.
//
// # What counts as stuck
//
// A loop is working from its Beat until it says it Waits. It waits for
// what comes by itself: a timer, work handed to it by another loop, the
// end of its context. A loop that works for longer than Config.Threshold
// without beating again is stuck; a loop that waits is never stuck,
// however long it waits, since what it waits for is not its own doing.
// So a relay that is merely waiting (its database or a broker is down, it
// is idle, it drains at shutdown) stays live, while every call a loop
// makes between its beats must be bounded, well within the threshold:
// then one that is not shows.
//
// The engine reports through a Loop per loop (Monitor.Start): Beat once
// per turn, whatever the turn's outcome, Wait before each pause, Done when
// the loop ends. Monitor.Check names the stuck loops, and Monitor.Run
// reports each stall as it begins and ends (Hooks).
//
// The state is pure: it reads the time through Config.Now, and its tests
// need no database.
package liveness

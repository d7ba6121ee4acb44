package keychain

import (
	"sync"
	"time"
)

// State is what a Link says of the rows behind it.
type State uint8

const (
	// Pending: the row's outcome, or that of a row before it, is not
	// known yet. The rows behind it wait.
	Pending State = iota
	// Passed: the row and every row before it in its chain were delivered
	// or dead-lettered. The row behind it may be sent.
	Passed
	// Stopped: the row, or a row before it, was not delivered (retried,
	// released, unknown). The rows behind it are released unsent.
	Stopped
)

// RegistrationDefault is Config.Registration's default.
const RegistrationDefault = 2 * time.Second

// Config configures Chains.
type Config struct {
	// Registration is how long a link that a claim names (Row.After) but
	// no claim of this relay registered waits to be registered before it
	// counts as stopped. Default RegistrationDefault.
	Registration time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Chains are the links of the keyed rows a relay holds: one per row it
// claimed, until the row is settled (and no claim that began before may
// still name it) or its lease is over. Safe for concurrent use.
type Chains struct {
	cfg     Config
	mu      sync.Mutex
	byID    map[int64]*Link
	running map[uint64]time.Time // the claims under way, by token, since when
	token   uint64
	// held counts, per key, the links registered and not yet settled or
	// forgotten: the keys of the rows the relay holds (Keys).
	held map[string]int
}

// Link is one keyed row's place in its key's chain.
type Link struct {
	id   int64
	prev *Link
	// next are the links that follow this one, wake the channels to
	// signal when it resolves (Wait).
	next  []*Link
	wake  []chan struct{}
	own   State // the row's own outcome (Pending until known)
	state State // what the link says (State)
	// registered is set once a claim of this relay registered the row;
	// a link only named by another claim's After is not, until then.
	registered bool
	expires    time.Time // when the row's lease is over
	settledAt  time.Time
	// key is the row's key, and counted set while the link counts in
	// Chains.held.
	key     string
	counted bool
}

// ID is the row's id.
func (l *Link) ID() int64 { return l.id }

// New returns empty Chains.
func New(cfg Config) *Chains {
	if cfg.Registration <= 0 {
		cfg.Registration = RegistrationDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Chains{cfg: cfg, byID: map[int64]*Link{}, running: map[uint64]time.Time{}, held: map[string]int{}}
}

// Begin records that a claim begins, and forgets the links no claim may
// name any more; the claim calls the returned end once its rows are
// registered (Claimed), or it failed.
func (c *Chains) Begin() (end func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	c.forget(now)
	c.token++
	t := c.token
	c.running[t] = now
	return func() {
		c.mu.Lock()
		delete(c.running, t)
		c.mu.Unlock()
	}
}

// forget drops the links that no claim may name: settled before every claim
// under way began, or whose lease is over.
func (c *Chains) forget(now time.Time) {
	oldest := now
	for _, start := range c.running {
		if start.Before(oldest) {
			oldest = start
		}
	}
	for id, l := range c.byID {
		if (!l.settledAt.IsZero() && l.settledAt.Before(oldest)) || now.After(l.expires) {
			c.uncount(l)
			delete(c.byID, id)
		}
	}
}

// uncount takes l out of the held keys' counts, if it counts there.
func (c *Chains) uncount(l *Link) {
	if !l.counted {
		return
	}
	l.counted = false
	if c.held[l.key]--; c.held[l.key] <= 0 {
		delete(c.held, l.key)
	}
}

// Keys returns the keys of the rows the relay holds: claimed (registered
// by Claimed) and not settled, each once, in no order; links past their
// lease are dropped by Begin, so right after Begin none of those. A claim
// of a keyed mode may take them as a hint that the key has a row in flight
// here (queryBucketsClaim); nothing of order rests on it.
func (c *Chains) Keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.held))
	for k := range c.held {
		keys = append(keys, k)
	}
	return keys
}

// Len is the number of links held.
func (c *Chains) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID)
}

// Row is a keyed row a claim leased.
type Row struct {
	ID  int64
	Key string
	// After, when not 0, is the id of the row of Key just before this
	// one, which the claim found leased by this relay: the first of the
	// key's rows in the claim follows it.
	After int64
}

// Claimed registers the keyed rows of one claim, in id order, leased until
// leaseEnd, and returns each row's link and the link it follows (nil: none,
// it may be sent at once): the previous row of its key in rows, or its
// After's.
func (c *Chains) Claimed(rows []Row, leaseEnd time.Time) (self, prev []*Link) {
	c.mu.Lock()
	defer c.mu.Unlock()
	self, prev = make([]*Link, len(rows)), make([]*Link, len(rows))
	last := map[string]*Link{}
	for i, r := range rows {
		p, ok := last[r.Key]
		if !ok && r.After != 0 {
			p = c.named(r.After, leaseEnd)
		}
		// A link only named so far (After) becomes this row's; a link
		// registered before is of an earlier claim of the row, whose lease
		// expired: the row starts a new one.
		l := c.byID[r.ID]
		if l == nil || l.registered {
			if l != nil {
				c.uncount(l)
			}
			l = &Link{id: r.ID}
			c.byID[r.ID] = l
		}
		l.registered, l.expires = true, leaseEnd
		if !l.counted && l.settledAt.IsZero() {
			l.key, l.counted = r.Key, true
			c.held[r.Key]++
		}
		l.prev = p
		if p != nil {
			p.next = append(p.next, l)
		}
		c.settle(l)
		self[i], prev[i], last[r.Key] = l, p, l
	}
	return self, prev
}

// named returns the link of id, which a claim named as the row before its
// own: an unknown one waits Registration to be registered, then stops.
func (c *Chains) named(id int64, leaseEnd time.Time) *Link {
	if l, ok := c.byID[id]; ok {
		return l
	}
	l := &Link{id: id, expires: leaseEnd}
	c.byID[id] = l
	time.AfterFunc(c.cfg.Registration, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !l.registered {
			l.own = Stopped
			c.settle(l)
		}
	})
	return l
}

// Resolve records the row's own outcome: passed (delivered, a duplicate,
// dead-lettered) or not. The first outcome counts; a link resolves once the
// link it follows has (settle).
func (c *Chains) Resolve(l *Link, passed bool) {
	if l == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.own != Pending {
		return
	}
	l.own = Stopped
	if passed {
		l.own = Passed
	}
	c.settle(l)
}

// settle works out what l says, and then what the links after it say.
func (c *Chains) settle(l *Link) {
	work := []*Link{l}
	for len(work) > 0 {
		l, work = work[len(work)-1], work[:len(work)-1]
		if l.state != Pending {
			continue
		}
		before := Passed
		if l.prev != nil {
			before = l.prev.state
		}
		switch {
		case before == Stopped:
			l.state = Stopped
		case before == Passed && l.own != Pending:
			l.state = l.own
		default:
			continue
		}
		work = append(work, l.next...)
		for _, ch := range l.wake {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		l.wake = nil
	}
}

// State is what l says of the rows behind it (a nil link: Passed).
func (c *Chains) State(l *Link) State {
	if l == nil {
		return Passed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return l.state
}

// Wait returns a channel that receives once one of links has resolved
// (at once when one has).
func (c *Chains) Wait(links []*Link) <-chan struct{} {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range links {
		if l == nil || l.state != Pending {
			ch <- struct{}{}
			return ch
		}
	}
	for _, l := range links {
		l.wake = append(l.wake, ch)
	}
	return ch
}

// Settled records that the rows of links were settled (or their settle
// given up): they are forgotten once every claim that began before now has
// ended.
func (c *Chains) Settled(links []*Link) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	for _, l := range links {
		if l != nil {
			l.settledAt = now
			c.uncount(l)
		}
	}
}

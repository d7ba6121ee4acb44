package pubsub

// Publishers returns how many publishers s keeps.
func Publishers(s *Sink) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.topics)
}

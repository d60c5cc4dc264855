package send

// SetCounts sets the attempts made and the throttles among them, as if the
// send had made them: for decide_test.go's table, which reads real wire
// answers through a classifier in an external test package.
func (x *Executor) SetCounts(attempts, throttles int) {
	x.attempts, x.throttles = attempts, throttles
}

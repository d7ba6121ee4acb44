package relay

// NotifyChannel exposes notifyChannel to the external tests.
var NotifyChannel = notifyChannel

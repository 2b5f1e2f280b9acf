package fdlimit

import "log/slog"

// RaiseAndReport raises the limit (Raise) and logs the limit in force, or
// why it could not be read or raised.
func RaiseAndReport(log *slog.Logger) {
	l, err := Raise()
	if err != nil {
		log.Warn("the open file limit could not be raised", "soft", l.Soft, "hard", l.Hard, "err", err)
		return
	}
	log.Info("open file limit", "soft", l.Soft, "hard", l.Hard)
}

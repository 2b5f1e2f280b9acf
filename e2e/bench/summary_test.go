package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// printSummary prints this run's raw numbers and every ratio whose two
// sides were both measured. Ratios only mean something within one run.
func printSummary(w io.Writer) {
	results.Lock()
	defer results.Unlock()
	if len(results.order) == 0 {
		return
	}
	fmt.Fprintln(w, "\n== nereid bench: raw results (loopback, this run)")
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tc\tn\tp50\tp99\treq/s\tpeak RSS\t")
	for _, k := range results.order {
		r := results.m[k]
		rss := ""
		if v := results.rss[k]; v > 0 {
			rss = fmt.Sprintf("%d MiB", v>>20)
		}
		if k == "memcpy-64MiB" {
			fmt.Fprintf(tw, "%s\t1\t%d\t%s\t\t%.2f GB/s\t\t\n", k, r.N, dur(r.P50), float64(64<<20)/r.P50.Seconds()/1e9)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%.0f\t%s\t\n", k, r.Conc, r.N, dur(r.P50), dur(r.P99), r.PerSec, rss)
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "\n== nereid bench: ratios (path / baseline; time: lower is better, req/s: higher is better)")
	tw = tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "path\tbaseline\tratio\ttarget\t")
	for _, c := range comparisons {
		p, ok1 := results.m[c.path]
		base, ok2 := results.m[c.base]
		if !ok1 && !strings.HasPrefix(c.path, "nereid-") {
			continue
		}
		switch {
		case !ok1 && ok2:
			fmt.Fprintf(tw, "%s\t%s\t(not measured)\t%s\t\n", c.path, c.base, target(c))
			continue
		case !ok1 || !ok2:
			continue
		}
		var got, flag string
		if c.target > 0 {
			flag = "  met"
		}
		switch c.kind {
		case latency:
			r50, r99 := ratio(p.P50, base.P50), ratio(p.P99, base.P99)
			got = fmt.Sprintf("p50 %.2fx (%s vs %s), p99 %.2fx (%s vs %s)", r50, dur(p.P50), dur(base.P50), r99, dur(p.P99), dur(base.P99))
			if c.target > 0 && (r50 > c.target || c.targetP99 > 0 && r99 > c.targetP99) {
				flag = "  <- missed (over target)"
			}
		case throughput:
			r := p.PerSec / base.PerSec
			got = fmt.Sprintf("req/s %.2fx (%.0f vs %.0f)", r, p.PerSec, base.PerSec)
			if c.target > 0 && r < c.target {
				flag = "  <- missed (under target)"
			}
		case duration:
			r := ratio(p.P50, base.P50)
			got = fmt.Sprintf("time %.2fx (%s vs %s)", r, dur(p.P50), dur(base.P50))
			if c.target > 0 && r > c.target {
				flag = "  <- missed (over target)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s%s\t\n", c.path, c.base, got, target(c), flag)
	}
	_ = tw.Flush()
	if ns := summaryNotes(); len(ns) > 0 { // numbers that are not ratios (sequence_test.go)
		fmt.Fprintln(w, "\n== nereid bench: other numbers")
		for _, n := range ns {
			fmt.Fprintln(w, n)
		}
	}
	fmt.Fprintln(w)
}

func target(c comparison) string {
	switch {
	case c.target == 0:
		return "report"
	case c.kind == latency && c.targetP99 == 0: // a p50 target only
		return fmt.Sprintf("p50 <= %.2fx", c.target)
	case c.kind == latency:
		return fmt.Sprintf("p50 <= %.2fx, p99 <= %.2fx", c.target, c.targetP99)
	case c.kind == throughput:
		return fmt.Sprintf(">= %.2fx", c.target)
	default:
		return fmt.Sprintf("<= %.2fx", c.target)
	}
}

func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", us(d))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", ms(d))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

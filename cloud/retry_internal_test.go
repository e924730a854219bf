package cloud

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header string
		want   time.Duration
		ok     bool
	}{
		{"absent", "", 0, false},
		{"seconds", "3", 3 * time.Second, true},
		{"capped", "3600", maxBackoff, true},
		{"a date in the past", "Mon, 02 Jan 2006 15:04:05 GMT", 0, true},
		{"garbage", "soon", 0, false},
		{"negative", "-1", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tt.header != "" {
				h.Set("Retry-After", tt.header)
			}
			got, ok := retryAfter(h)
			if got != tt.want || ok != tt.ok {
				t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tt.header, got, ok, tt.want, tt.ok)
			}
		})
	}
}

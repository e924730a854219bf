package world

import "testing"

func TestProxyOnly(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "https://proxy.golang.org"},
		{"https://proxy.golang.org,direct", "https://proxy.golang.org"},
		{"direct", "off"},
		{"off", "off"},
		{"https://athens.internal|https://proxy.golang.org,direct", "https://athens.internal|https://proxy.golang.org"},
		{"direct,https://a.internal", "https://a.internal"},
		{" https://a.internal , direct ", "https://a.internal"},
	}
	for _, tt := range tests {
		if got := proxyOnly(tt.in); got != tt.want {
			t.Errorf("proxyOnly(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

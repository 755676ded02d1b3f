package protocol

import "testing"

func TestES6Number(t *testing.T) {
	cases := map[float64]string{
		0: "0", 1: "1", -1: "-1", 7.0: "7", 2.5: "2.5", 0.5: "0.5", 1e21: "1e+21", 1e20: "100000000000000000000",
		123456789012345680000: "123456789012345680000", 1e-6: "0.000001", 1e-7: "1e-7", 1.5e-7: "1.5e-7",
		0.1: "0.1", 1.0 / 3: "0.3333333333333333", 9007199254740992: "9007199254740992",
		5e-324: "5e-324", 1.7976931348623157e308: "1.7976931348623157e+308", 333333333.3333332: "333333333.3333332",
		-0.0000033333333333333333: "-0.0000033333333333333333", 295147905179352830000: "295147905179352830000",
		4.5: "4.5", 1e23: "1e+23", 123e-20: "1.23e-18",
	}
	for v, want := range cases {
		got, err := ES6Number(v)
		if err != nil || got != want {
			t.Errorf("ES6Number(%v) = %q, %v; want %q", v, got, err, want)
		}
	}
}

func TestCanonical(t *testing.T) {
	in := `{"amount": 7.0, "rate": 2.50, "memo": "café ☕ 😀 naïve", "ctl": "a\u001fb\nc",
	  "\uffff-key": 1, "\ud800\udc00-key": 2, "nested": {"b": [1, 0.5, {"z": null, "a": true}], "a": "x/y<&>"},
	  "e": 1E2, "q": "\"\\\b\f\r\t\u007f\u2028"}`
	want := "{\"amount\":7,\"ctl\":\"a\\u001fb\\nc\",\"e\":100,\"memo\":\"café ☕ 😀 naïve\"," +
		"\"nested\":{\"a\":\"x/y<&>\",\"b\":[1,0.5,{\"a\":true,\"z\":null}]},\"q\":\"\\\"\\\\\\b\\f\\r\\t\u007f\u2028\"," +
		"\"rate\":2.5,\"\U00010000-key\":2,\"\uffff-key\":1}"
	got, err := Canonical([]byte(in))
	if err != nil || got != want {
		t.Errorf("Canonical:\n got %s\nwant %s (%v)", got, want, err)
	}
}

package jsonlex

import (
	"encoding/json"
	"strings"
	"testing"
)

// walk reads every token of doc.
func walk(doc []byte) error {
	l := New(doc)
	for {
		t, err := l.Next()
		if err != nil {
			return err
		}
		if t.Kind == EOF {
			return nil
		}
	}
}

func TestLexerErrors(t *testing.T) {
	tests := []struct {
		doc, err string
	}{
		{``, "The document is empty. at 0"},
		{`   `, "The document is empty. at 3"},
		{`{`, "Missing a name for object member. at 1"},
		{`{"a"}`, "Missing a colon after a name of object member. at 4"},
		{`{"a":1 "b":2}`, "Missing a comma or '}' after an object member. at 7"},
		{`{"a":1,}`, "Missing a name for object member. at 7"},
		{`[1 2]`, "Missing a comma or ']' after an array element. at 3"},
		{`[1,]`, "Invalid value. at 3"},
		{`[1}`, "Missing a comma or ']' after an array element. at 2"},
		{`{"a":1]`, "Missing a comma or '}' after an object member. at 6"},
		{`tru`, "Invalid value. at 0"},
		{`-`, "Invalid value. at 1"},
		{`1.`, "Miss fraction part in number. at 2"},
		{`1e`, "Miss exponent in number. at 2"},
		{`01`, "The document root must not be followed by other values. at 1"},
		{`{} {}`, "The document root must not be followed by other values. at 3"},
		{`"abc`, "Missing a closing quotation mark in string. at 0"},
		{`"\x"`, "Invalid escape character in string. at 1"},
		{`"\u12g4"`, "Incorrect hex digit after \\u escape in string. at 1"},
		{`"\ud800"`, "The surrogate pair in string is invalid. at 1"},
		{`"\ud800\u0041"`, "The surrogate pair in string is invalid. at 1"},
		{`"\udc00"`, "The surrogate pair in string is invalid. at 1"},
		{"\"a\tb\"", "Invalid encoding in string. at 2"},
		{`NaN`, "Invalid value. at 0"},
	}
	for _, tc := range tests {
		err := walk([]byte(tc.doc))
		if err == nil || err.Error() != "failed to parse the request JSON buffer: "+tc.err {
			t.Errorf("%q: got %v, want %q", tc.doc, err, tc.err)
		}
	}
}

func TestLexerDepth(t *testing.T) {
	ok := strings.Repeat(`{"a":`, 50) + strings.Repeat("[", 50) + strings.Repeat("]", 50) + strings.Repeat("}", 50)
	if err := walk([]byte(ok)); err != nil {
		t.Fatal(err)
	}
	bad := strings.Repeat("[", 101) + strings.Repeat("]", 101)
	if err := walk([]byte(bad)); err == nil || err.Error() != "JSON nesting depth exceeds maximum allowed limit (100)" {
		t.Fatalf("got %v", err)
	}
}

func TestLexerValid(t *testing.T) {
	docs := []string{
		`{}`, `[]`, `0`, `-0`, `-1.5e+10`, `"x"`, `true`, `null`,
		` {"a" : [1, {"b": "c\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"}, false, null], "d": {} } `,
	}
	for _, d := range docs {
		if err := walk([]byte(d)); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
}

func TestUnquote(t *testing.T) {
	doc := []byte(`"a\"b\\c\/d\b\f\n\r\t\u00e9\u4e2d\ud83d\ude00\u0000"`)
	l := New(doc)
	tok, err := l.Next()
	if err != nil {
		t.Fatal(err)
	}
	var want string
	if err := json.Unmarshal(doc, &want); err != nil {
		t.Fatal(err)
	}
	if got := StringValue(tok); got != want {
		t.Errorf("got %q want %q", got, want)
	}
	if n := UnquotedLen(tok); n != len(want) {
		t.Errorf("UnquotedLen %d want %d", n, len(want))
	}
}

func TestSkipValue(t *testing.T) {
	doc := []byte(`{"data": [[1,2],[3]], "s": "x\"y", "n": 12, "z": {"q": []}}`)
	l := New(doc)
	want := map[string]string{"data": `[[1,2],[3]]`, "s": `"x\"y"`, "n": `12`, "z": `{"q": []}`}
	if tok, _ := l.Next(); tok.Kind != BeginObject {
		t.Fatal("want object")
	}
	for {
		k, err := l.Next()
		if err != nil {
			t.Fatal(err)
		}
		if k.Kind == EndObject {
			break
		}
		v, err := l.Next()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := l.SkipValue(v)
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) != want[string(k.Raw)] {
			t.Errorf("%s: got %s", k.Raw, raw)
		}
	}
}

func TestNumbers(t *testing.T) {
	num := func(s string) Token { return Token{Kind: Number, Raw: []byte(s)} }
	if v, ok := Int64(num("-9223372036854775808")); !ok || v != -1<<63 {
		t.Error("min int64")
	}
	if _, ok := Int64(num("9223372036854775808")); ok {
		t.Error("int64 overflow accepted")
	}
	if v, ok := Uint64(num("18446744073709551615")); !ok || v != 1<<64-1 {
		t.Error("max uint64")
	}
	if _, ok := Uint64(num("18446744073709551616")); ok {
		t.Error("uint64 overflow accepted")
	}
	if _, ok := Uint64(num("-1")); ok {
		t.Error("negative uint accepted")
	}
	if v, ok := Uint64(num("-0")); !ok || v != 0 {
		t.Error("-0")
	}
	if _, ok := Float64(num("1e400")); ok {
		t.Error("1e400 accepted")
	}
	if v, ok := Float64(num("1e-400")); !ok || v != 0 {
		t.Error("underflow should round to 0")
	}
}

// FuzzLexer checks the lexer against encoding/json: same verdict on
// validity (modulo depth and UTF-8, which encoding/json treats differently),
// and never a panic.
func FuzzLexer(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}]}`, `"\ud83d\ude00"`, `[1e5,-0.5]`, `[`, `{"a":}`, `"\u12"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		err := walk(doc)
		if strings.Contains(string(doc), "\\u") || depthOf(doc) > DefaultMaxDepth {
			return // surrogate and depth rules are stricter than encoding/json
		}
		if valid := json.Valid(doc); valid != (err == nil) && validUTF8Strings(doc) {
			t.Fatalf("lexer says %v, encoding/json says valid=%v for %q", err, valid, doc)
		}
	})
}

func depthOf(doc []byte) int {
	d, m := 0, 0
	for _, c := range doc {
		switch c {
		case '[', '{':
			d++
			if d > m {
				m = d
			}
		case ']', '}':
			d--
		}
	}
	return m
}

func validUTF8Strings(doc []byte) bool {
	return strings.ToValidUTF8(string(doc), "\uFFFD") == string(doc)
}

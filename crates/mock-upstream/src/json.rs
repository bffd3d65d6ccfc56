//! Tiny ordered JSON object builder.
//!
//! `serde_json::Value` (without the `preserve_order` feature, which would pull
//! in another crate) sorts object keys. Provider bodies read better, and match
//! real providers, with their usual key order, so response bodies are built
//! with this builder instead. Strings are escaped with `serde_json`.

/// Encodes `s` as a JSON string literal.
pub fn string(s: &str) -> String {
    // Serializing a &str cannot fail; fall back to an empty literal anyway.
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
}

/// Joins already-encoded JSON values into an array.
pub fn array<I: IntoIterator<Item = String>>(items: I) -> String {
    let parts: Vec<String> = items.into_iter().collect();
    format!("[{}]", parts.join(","))
}

/// An object under construction; fields keep insertion order.
#[derive(Debug, Default, Clone)]
pub struct Obj {
    buf: String,
}

impl Obj {
    pub fn new() -> Self {
        Obj { buf: String::new() }
    }

    fn key(mut self, k: &str) -> Self {
        if !self.buf.is_empty() {
            self.buf.push(',');
        }
        self.buf.push_str(&string(k));
        self.buf.push(':');
        self
    }

    /// Adds a string field.
    pub fn str(self, k: &str, v: &str) -> Self {
        let mut o = self.key(k);
        o.buf.push_str(&string(v));
        o
    }

    /// Adds a string field, or `null` when `v` is `None`.
    pub fn opt_str(self, k: &str, v: Option<&str>) -> Self {
        match v {
            Some(v) => self.str(k, v),
            None => self.null(k),
        }
    }

    /// Adds an unsigned number field.
    pub fn num(self, k: &str, v: u64) -> Self {
        let mut o = self.key(k);
        o.buf.push_str(&v.to_string());
        o
    }

    /// Adds a `null` field.
    pub fn null(self, k: &str) -> Self {
        self.raw(k, "null")
    }

    /// Adds a field whose value is already-encoded JSON.
    pub fn raw(self, k: &str, json: &str) -> Self {
        let mut o = self.key(k);
        o.buf.push_str(json);
        o
    }

    /// Adds a nested object field.
    pub fn obj(self, k: &str, v: Obj) -> Self {
        let inner = v.build();
        self.raw(k, &inner)
    }

    /// Finishes the object.
    pub fn build(self) -> String {
        format!("{{{}}}", self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_escapes() {
        let s = Obj::new()
            .str("z", "a\"b")
            .num("a", 3)
            .null("n")
            .obj("o", Obj::new().str("k", "v"))
            .raw("arr", &array(vec!["1".into(), "2".into()]))
            .build();
        assert_eq!(s, r#"{"z":"a\"b","a":3,"n":null,"o":{"k":"v"},"arr":[1,2]}"#);
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["z"], "a\"b");
    }
}

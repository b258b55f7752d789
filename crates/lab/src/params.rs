//! Reading experiment parameters from the scenario JSON with errors that name the key.

use anyhow::{anyhow, bail};
use serde_json::Value;

/// The value at dotted `key`, or an error naming it.
pub fn get<'a>(params: &'a Value, key: &str) -> anyhow::Result<&'a Value> {
    let mut cur = params;
    for part in key.split('.') {
        cur = cur
            .get(part)
            .ok_or_else(|| anyhow!("scenario parameter {key:?} is missing"))?;
    }
    Ok(cur)
}

pub fn f64_at(params: &Value, key: &str) -> anyhow::Result<f64> {
    let v = get(params, key)?;
    v.as_f64()
        .filter(|x| x.is_finite())
        .ok_or_else(|| anyhow!("scenario parameter {key:?} must be a number, got {v}"))
}

/// A number that must be > 0.
pub fn positive_f64(params: &Value, key: &str) -> anyhow::Result<f64> {
    let x = f64_at(params, key)?;
    if x <= 0.0 {
        bail!("scenario parameter {key:?} must be > 0, got {x}");
    }
    Ok(x)
}

pub fn u64_at(params: &Value, key: &str) -> anyhow::Result<u64> {
    let v = get(params, key)?;
    v.as_u64().ok_or_else(|| {
        anyhow!("scenario parameter {key:?} must be a non-negative integer, got {v}")
    })
}

/// A positive integer.
pub fn count_at(params: &Value, key: &str) -> anyhow::Result<usize> {
    let n = u64_at(params, key)?;
    if n == 0 {
        bail!("scenario parameter {key:?} must be ≥ 1, got 0");
    }
    Ok(n as usize)
}

pub fn bool_at(params: &Value, key: &str) -> anyhow::Result<bool> {
    let v = get(params, key)?;
    v.as_bool()
        .ok_or_else(|| anyhow!("scenario parameter {key:?} must be true or false, got {v}"))
}

pub fn str_at<'a>(params: &'a Value, key: &str) -> anyhow::Result<&'a str> {
    let v = get(params, key)?;
    v.as_str()
        .ok_or_else(|| anyhow!("scenario parameter {key:?} must be a string, got {v}"))
}

/// A non-empty array of numbers.
pub fn f64_list(params: &Value, key: &str) -> anyhow::Result<Vec<f64>> {
    let v = get(params, key)?;
    let arr = v
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| anyhow!("scenario parameter {key:?} must be a non-empty array, got {v}"))?;
    arr.iter()
        .map(|x| {
            x.as_f64()
                .ok_or_else(|| anyhow!("scenario parameter {key:?}: {x} is not a number"))
        })
        .collect()
}

/// A non-empty array of positive integers.
pub fn count_list(params: &Value, key: &str) -> anyhow::Result<Vec<usize>> {
    let v = get(params, key)?;
    let arr = v
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| anyhow!("scenario parameter {key:?} must be a non-empty array, got {v}"))?;
    arr.iter()
        .map(|x| match x.as_u64() {
            Some(n) if n > 0 => Ok(n as usize),
            _ => Err(anyhow!(
                "scenario parameter {key:?}: {x} is not a positive integer"
            )),
        })
        .collect()
}

/// A non-empty array of strings.
pub fn str_list(params: &Value, key: &str) -> anyhow::Result<Vec<String>> {
    let v = get(params, key)?;
    let arr = v
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| anyhow!("scenario parameter {key:?} must be a non-empty array, got {v}"))?;
    arr.iter()
        .map(|x| {
            x.as_str()
                .map(str::to_string)
                .ok_or_else(|| anyhow!("scenario parameter {key:?}: {x} is not a string"))
        })
        .collect()
}

/// An array of strings that may be empty or absent (optional extras).
pub fn str_list_or_empty(params: &Value, key: &str) -> anyhow::Result<Vec<String>> {
    match get(params, key) {
        Err(_) => Ok(Vec::new()),
        Ok(Value::Array(a)) if a.is_empty() => Ok(Vec::new()),
        Ok(_) => str_list(params, key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_key() {
        let p = serde_json::json!({"a": {"b": 2, "s": "x", "l": [1, 2]}});
        assert_eq!(f64_at(&p, "a.b").unwrap(), 2.0);
        assert_eq!(count_list(&p, "a.l").unwrap(), vec![1, 2]);
        let e = f64_at(&p, "a.c").unwrap_err().to_string();
        assert!(e.contains("\"a.c\""), "{e}");
        let e = f64_at(&p, "a.s").unwrap_err().to_string();
        assert!(e.contains("must be a number"), "{e}");
    }
}

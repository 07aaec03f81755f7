// Issue 23.4: Rust v0 names (`_R...`) in backtraces are demangled as Rust. Built with
// `-C symbol-mangling-version=v0`; the leaked box comes from the system allocator (malloc).
#[inline(never)]
fn leak_it(n: usize) -> &'static mut Vec<u8> {
    Box::leak(Box::new(vec![7u8; n]))
}

fn main() {
    let v = leak_it(1234);
    println!("{}", v.len());
}

//! Text rows parsed in parallel, in order: the engine behind the Criteo and CSV readers.
//!
//! A producer thread reads the file's lines ([`crate::lines`]: blank and over-long
//! lines, line numbers), applies the [`RowSelect`] (every non-blank line counts as a
//! row, malformed or not), and copies the selected lines into blocks of about
//! [`BLOCK_BYTES`] of text. Each block is cut into chunks that rayon's pool parses in
//! parallel into flat [`RecordBlock`]s, while the producer already reads the next block
//! (`rayon::join`). The chunks travel in order through a bounded channel to the reader,
//! which hands out rows and applies the [`BadRows`] policy, so a malformed row is an
//! error (or a skip) at exactly the place it would be read sequentially. The pool is
//! the readers' own (not rayon's global one, so that a reader called from inside the
//! global pool cannot starve its own parsing); `RAYON_NUM_THREADS` sets its size as it
//! does the global pool's (default: one thread per core).
//!
//! [`TextRows::sequential`] keeps the plain one-line-at-a-time path ([`RowCursor`]);
//! the tests check that both give the same rows, skips and errors.

use crate::block::RecordBlock;
use crate::error::{Error, Result};
use crate::lines::Lines;
use crate::record::{BadRows, Record};
use crate::text::{RowCursor, RowSelect};
use rayon::prelude::*;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use towerrec_core::Batch;

/// Text per block handed to the pool: 4 MiB, about 20 000 Criteo rows.
pub const BLOCK_BYTES: usize = 4 << 20;

/// Parsed chunks that may wait in the channel (about two blocks).
const QUEUE: usize = 32;

/// One line of a text file, as a parser sees it.
pub(crate) struct Line<'a> {
    /// The file name as shown in errors.
    pub name: &'a str,
    /// 1-based line number.
    pub line_no: u64,
    /// The line's bytes, without its terminator.
    pub buf: &'a [u8],
}

impl Line<'_> {
    /// A parse error at this line.
    pub fn error(
        &self,
        field: impl Into<String>,
        expected: impl Into<String>,
        found: String,
    ) -> Error {
        Error::Parse {
            file: self.name.to_string(),
            line: self.line_no,
            field: field.into(),
            expected: expected.into(),
            found,
        }
    }
}

/// Parses one line of a format into a [`RecordBlock`].
pub(crate) trait RowParser: Clone + Send + Sync + 'static {
    /// Per-thread scratch space (reused between lines).
    type Scratch: Default;
    /// Appends the row `line` holds to `out`; on error, `out` may hold a partial row
    /// (the caller rolls it back).
    fn parse(
        &self,
        line: &Line<'_>,
        scratch: &mut Self::Scratch,
        out: &mut RecordBlock,
    ) -> Result<()>;
}

/// Parses `line` into `out`, rolling back a partial row on error.
fn parse_row<P: RowParser>(
    parser: &P,
    line: &Line<'_>,
    scratch: &mut P::Scratch,
    out: &mut RecordBlock,
) -> Result<()> {
    let mark = out.mark();
    let parsed = parser.parse(line, scratch, out);
    if parsed.is_err() {
        out.truncate(mark);
    }
    parsed
}

/// A selected line waiting to be parsed, or a row already known to be bad.
enum Pending {
    Line {
        line_no: u64,
        start: usize,
        end: usize,
    },
    Bad(Option<Error>),
}

/// Parsed rows of one chunk, in file order: `outcomes[k]` is `None` for a row that
/// parsed (the next row of `block`) or the error of a row that did not.
struct Parsed {
    block: RecordBlock,
    outcomes: Vec<Option<Error>>,
    /// Next outcome to hand out, and the row of `block` it is if it parsed.
    pos: usize,
    row: usize,
}

/// The reader's side of a running producer.
struct Consumer {
    rx: Receiver<Parsed>,
    cur: Option<Parsed>,
    producer: Option<JoinHandle<()>>,
    /// Chunks read out go back to the producer to be filled again (fresh buffers cost
    /// the kernel's zeroing of their pages every time).
    spent: SyncSender<Parsed>,
}

enum State {
    /// Not read from yet (encodings and splits can still be set).
    Idle(Lines),
    Seq(RowCursor),
    Par(Consumer),
    Done,
}

/// The rows of a text file parsed by `P` (see the module doc).
pub(crate) struct TextRows<P: RowParser> {
    pub parser: Arc<P>,
    num_dense: usize,
    num_sparse: usize,
    bad_rows: BadRows,
    select: RowSelect,
    block_bytes: usize,
    sequential: bool,
    state: State,
    skipped: u64,
    /// Scratch for the sequential path.
    scratch: P::Scratch,
    one: RecordBlock,
}

impl<P: RowParser> TextRows<P> {
    pub fn new(lines: Lines, parser: P, shape: (usize, usize), bad_rows: BadRows) -> Self {
        Self {
            parser: Arc::new(parser),
            num_dense: shape.0,
            num_sparse: shape.1,
            bad_rows,
            select: RowSelect::All,
            block_bytes: BLOCK_BYTES,
            sequential: false,
            state: State::Idle(lines),
            skipped: 0,
            scratch: P::Scratch::default(),
            one: RecordBlock::new(shape.0, shape.1),
        }
    }

    pub fn set_select(&mut self, select: RowSelect) {
        self.select = select;
    }

    /// Reads one line at a time on the calling thread (the reference path).
    pub fn sequential(&mut self) {
        self.sequential = true;
    }

    /// Sets the text per parallel block (tests use tiny blocks to cut everywhere).
    pub fn set_block_bytes(&mut self, bytes: usize) {
        self.block_bytes = bytes.max(1);
    }

    /// The parser, to change before the first read.
    pub fn parser_mut(&mut self) -> &mut P {
        Arc::make_mut(&mut self.parser)
    }

    /// Rows skipped as malformed so far.
    pub fn skipped(&self) -> u64 {
        match &self.state {
            State::Seq(c) => c.skipped(),
            _ => self.skipped,
        }
    }

    /// The 0-based index of the row read last; the sequential path only (the parallel
    /// one does not track it).
    pub fn last_row(&self) -> u64 {
        match &self.state {
            State::Seq(c) => c.last_row(),
            _ => panic!(
                "last_row: a bug: asked of a reader not made sequential before its first read"
            ),
        }
    }

    fn start(&mut self) -> Result<()> {
        let State::Idle(_) = self.state else {
            return Ok(());
        };
        let State::Idle(lines) = std::mem::replace(&mut self.state, State::Done) else {
            unreachable!("checked above")
        };
        if self.sequential {
            let mut cursor = RowCursor::new(lines, self.bad_rows);
            cursor.set_select(self.select.clone());
            self.state = State::Seq(cursor);
            return Ok(());
        }
        let (tx, rx) = sync_channel(QUEUE);
        let (spent, spent_rx) = sync_channel(QUEUE);
        let name: Arc<str> = Arc::from(lines.name.as_str());
        let producer = Producer {
            name: Arc::clone(&name),
            lines,
            select: self.select.clone(),
            parser: Arc::clone(&self.parser),
            shape: (self.num_dense, self.num_sparse),
            block_bytes: self.block_bytes,
            next_row: 0,
            done: false,
            spare: None,
            spent: spent_rx,
        };
        let handle = std::thread::Builder::new()
            .name("towerrec-text".into())
            .spawn(move || producer.run(tx))
            .map_err(|e| Error::io(&*name, e))?;
        self.state = State::Par(Consumer {
            rx,
            cur: None,
            producer: Some(handle),
            spent,
        });
        Ok(())
    }

    /// The next chunk of the parallel path; None at the end.
    fn chunk(c: &mut Consumer) -> Option<&mut Parsed> {
        loop {
            if c.cur.as_ref().is_some_and(|p| p.pos < p.outcomes.len()) {
                return c.cur.as_mut();
            }
            match c.rx.recv() {
                Ok(p) => {
                    if let Some(done) = c.cur.replace(p) {
                        // Full or gone: the producer allocates instead.
                        let _ = c.spent.try_send(done);
                    }
                }
                Err(_) => {
                    // The producer has ended; a panic there is a bug, not an end of data.
                    if let Some(h) = c.producer.take() {
                        if let Err(panic) = h.join() {
                            std::panic::resume_unwind(panic);
                        }
                    }
                    c.cur = None;
                    return None;
                }
            }
        }
    }

    /// Appends up to `max` rows to `out`; returns how many (0 at the end). Rows before a
    /// malformed one under [`BadRows::Fail`] come first; its error comes on the next call.
    pub fn read_into(&mut self, max: usize, out: &mut RecordBlock) -> Result<usize> {
        self.start()?;
        let before = out.len();
        match &mut self.state {
            State::Idle(_) | State::Done => Ok(0),
            State::Seq(cursor) => {
                let (parser, scratch) = (&*self.parser, &mut self.scratch);
                while out.len() - before < max {
                    let got = cursor.next(|lines| {
                        let line = Line {
                            name: &lines.name,
                            line_no: lines.line_no,
                            buf: &lines.buf,
                        };
                        parse_row(parser, &line, scratch, out)
                    })?;
                    if got.is_none() {
                        break;
                    }
                }
                Ok(out.len() - before)
            }
            State::Par(c) => {
                while out.len() - before < max {
                    let Some(p) = Self::chunk(c) else { break };
                    // A run of rows that parsed.
                    let want = max - (out.len() - before);
                    let run = p.outcomes[p.pos..]
                        .iter()
                        .take(want)
                        .take_while(|o| o.is_none())
                        .count();
                    if run > 0 {
                        out.extend_from(&p.block, p.row..p.row + run);
                        p.pos += run;
                        p.row += run;
                        continue;
                    }
                    let is_skip = self.bad_rows == BadRows::Skip
                        && p.outcomes[p.pos].as_ref().is_some_and(Error::is_bad_row);
                    if is_skip {
                        p.pos += 1;
                        self.skipped += 1;
                    } else if out.len() > before {
                        break;
                    } else {
                        let e = p.outcomes[p.pos].take();
                        p.pos += 1;
                        if let Some(e) = e {
                            return Err(e);
                        }
                    }
                }
                Ok(out.len() - before)
            }
        }
    }

    /// The next `n` rows (fewer at the end) as a batch of `schema`'s features; an error
    /// in them is returned instead of the rows before it, as reading them one by one
    /// into a batch would.
    pub fn read_batch(&mut self, n: usize, schema: &crate::record::Schema) -> Result<Batch> {
        let mut block = RecordBlock::new(self.num_dense, self.num_sparse);
        while block.len() < n {
            if self.read_into(n - block.len(), &mut block)? == 0 {
                break;
            }
        }
        block.to_batch(schema)
    }

    /// The next row as a [`Record`].
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        let mut one = std::mem::take(&mut self.one);
        one.clear();
        (one.num_dense, one.num_sparse) = (self.num_dense, self.num_sparse);
        let got = self.read_into(1, &mut one);
        let record = (got.as_ref().is_ok_and(|&n| n == 1)).then(|| one.record(0));
        self.one = one;
        got.map(|_| record)
    }
}

/// The producer thread's state.
struct Producer<P> {
    lines: Lines,
    select: RowSelect,
    parser: Arc<P>,
    shape: (usize, usize),
    block_bytes: usize,
    next_row: u64,
    done: bool,
    name: Arc<str>,
    /// The text buffer and line list of a block already parsed, reused for the next
    /// one: a fresh 4 MiB buffer per block costs the kernel's zeroing of its pages
    /// every time.
    spare: Option<(Vec<u8>, Vec<Pending>)>,
    /// Chunks the reader is done with, to parse into again (the same reason).
    spent: Receiver<Parsed>,
}

/// Lines of one block: their bytes and what each selected row is.
struct Block {
    text: Vec<u8>,
    pending: Vec<Pending>,
    /// A read error after the block's rows (an unreadable file, an endless line).
    terminal: Option<Error>,
    /// The file name shown in errors.
    name: Arc<str>,
}

impl<P: RowParser> Producer<P> {
    fn run(mut self, tx: SyncSender<Parsed>) {
        let mut block = self.read_block();
        loop {
            let last = self.done;
            let (parsed, next) = if last {
                (self.parse(&mut block), None)
            } else {
                let parser = Arc::clone(&self.parser);
                let shape = self.shape;
                let cur = &mut block;
                let spares: Vec<Parsed> = self.spent.try_iter().collect();
                let (parsed, next) = rayon::join(
                    || parse_block(&*parser, shape, cur, spares),
                    || self.read_block(),
                );
                (parsed, Some(next))
            };
            for p in parsed {
                if tx.send(p).is_err() {
                    return;
                }
            }
            self.spare = Some((
                std::mem::take(&mut block.text),
                std::mem::take(&mut block.pending),
            ));
            if let Some(e) = block.terminal.take() {
                let _ = tx.send(Parsed {
                    block: RecordBlock::new(self.shape.0, self.shape.1),
                    outcomes: vec![Some(e)],
                    pos: 0,
                    row: 0,
                });
                return;
            }
            match next {
                Some(n) => block = n,
                None => return,
            }
        }
    }

    fn parse(&self, block: &mut Block) -> Vec<Parsed> {
        let (parser, shape) = (&*self.parser, self.shape);
        let spares: Vec<Parsed> = self.spent.try_iter().collect();
        in_pool(|| parse_block(parser, shape, block, spares))
    }

    /// Reads the next block of selected lines; sets `done` at the end of the rows.
    fn read_block(&mut self) -> Block {
        let (mut text, mut pending) = self.spare.take().unwrap_or_else(|| {
            let bytes = Vec::with_capacity(self.block_bytes.min(BLOCK_BYTES) + 4096);
            (bytes, Vec::new())
        });
        text.clear();
        pending.clear();
        let mut block = Block {
            text,
            pending,
            terminal: None,
            name: Arc::clone(&self.name),
        };
        while block.text.len() < self.block_bytes && block.pending.len() < self.block_bytes {
            if self.next_row >= self.select.end() {
                self.done = true;
                break;
            }
            match self.lines.next_line() {
                Ok(true) => {}
                Ok(false) => {
                    self.done = true;
                    break;
                }
                Err(e) => {
                    block.terminal = Some(e);
                    self.done = true;
                    break;
                }
            }
            let row = self.next_row;
            self.next_row += 1;
            if !self.select.contains(row) {
                continue;
            }
            if self.lines.too_long {
                let e = self.lines.too_long_error("row");
                block.pending.push(Pending::Bad(Some(e)));
                continue;
            }
            let start = block.text.len();
            block.text.extend_from_slice(&self.lines.buf);
            block.pending.push(Pending::Line {
                line_no: self.lines.line_no,
                start,
                end: block.text.len(),
            });
        }
        block
    }
}

/// Runs `f` in the text readers' thread pool (started on first use; sized by
/// `RAYON_NUM_THREADS` or the cores), or in rayon's global pool if the OS refused the
/// threads of a pool of its own.
fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("towerrec-parse-{i}"))
            .build()
            .ok()
    });
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}

/// Parses a block's lines in chunks on rayon's pool, keeping their order; `spares`:
/// chunks read out, whose buffers are filled again.
fn parse_block<P: RowParser>(
    parser: &P,
    shape: (usize, usize),
    block: &mut Block,
    spares: Vec<Parsed>,
) -> Vec<Parsed> {
    let n = block.pending.len();
    if n == 0 {
        return Vec::new();
    }
    let per = n.div_ceil(4 * rayon::current_num_threads()).max(1);
    let mut spares: Vec<Option<Parsed>> = spares.into_iter().map(Some).collect();
    spares.resize_with(n.div_ceil(per), || None);
    let text = &block.text;
    let name = &*block.name;
    block
        .pending
        .par_chunks_mut(per)
        .zip(spares.par_iter_mut())
        .map(|(chunk, spare)| {
            let (mut out, mut outcomes) = match spare.take() {
                Some(Parsed {
                    mut block,
                    mut outcomes,
                    ..
                }) if block.num_dense == shape.0 && block.num_sparse == shape.1 => {
                    block.clear();
                    outcomes.clear();
                    (block, outcomes)
                }
                _ => (
                    RecordBlock::with_capacity(shape.0, shape.1, chunk.len()),
                    Vec::with_capacity(chunk.len()),
                ),
            };
            let mut scratch = P::Scratch::default();
            outcomes.extend(chunk.iter_mut().map(|p| match p {
                Pending::Bad(e) => e.take(),
                Pending::Line {
                    line_no,
                    start,
                    end,
                } => {
                    let line = Line {
                        name,
                        line_no: *line_no,
                        buf: &text[*start..*end],
                    };
                    parse_row(parser, &line, &mut scratch, &mut out).err()
                }
            }));
            Parsed {
                block: out,
                outcomes,
                pos: 0,
                row: 0,
            }
        })
        .collect()
}

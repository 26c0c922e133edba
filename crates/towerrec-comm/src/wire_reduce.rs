//! AllReduce of f32 values sent in a reduced wire precision ([`WirePrecision`]; the
//! optional bf16 dense all-reduce of quantized communication, docs/DISTRIBUTED.md,
//! "Quantized communication"). As [`Comm::all_reduce_with`]: a ReduceScatter, each
//! rank's contribution rounded on its way out and the chunk summed in f32 in rank
//! order (the owner's own part exact, as it crosses no wire), then the summed chunk
//! rounded once, by its owner too, and gathered; so every rank ends with the same
//! bits, on both backends. [`crate::HierarchicalAllReduce::all_reduce_wire`] does the
//! same on each of its three steps.

use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::precision::WirePrecision;
use crate::traffic::Phase;
use crate::watchdog::Op;

impl Comm {
    /// [`Comm::all_reduce_with`] in `wire` precision (fp32: the plain one). Every rank
    /// gets the same bits: each chunk's sum, rounded to `wire`.
    pub fn all_reduce_wire(
        &self,
        buf: &mut [f32],
        scratch: &mut (Vec<f32>, Vec<f32>),
        phase: Phase,
        wire: WirePrecision,
    ) -> Result<()> {
        if wire == WirePrecision::Fp32 {
            return self.all_reduce_with(buf, scratch, phase);
        }
        let p = self.size();
        if p == 1 {
            return Ok(());
        }
        let _watch = self.enter(Op::AllReduce, Some(phase));
        let counts = crate::comm::even_split(buf.len(), p);
        let (arrived, mine) = scratch;
        self.reduce_scatter_wire(buf, &counts, arrived, mine, phase, wire)?;
        self.all_gather_chunks_wire(mine, buf, &counts, phase, wire)
    }

    /// The ReduceScatter of [`Comm::all_reduce_wire`]: chunk `rank` of the sum, in
    /// `out`, rounded to `wire`.
    pub(crate) fn reduce_scatter_wire(
        &self,
        send: &[f32],
        counts: &[usize],
        arrived: &mut Vec<f32>,
        out: &mut Vec<f32>,
        phase: Phase,
        wire: WirePrecision,
    ) -> Result<()> {
        let from = self.all_to_all_v_wire_into(send, counts, arrived, phase, wire)?;
        let me = self.rank();
        let mine = counts.get(me).copied().unwrap_or(0);
        if from.iter().any(|&c| c != mine) {
            return Err(Error::Mismatch(format!(
                "reduce_scatter: rank {me} expects {mine} elements, ranks sent {from:?}"
            )));
        }
        // This rank's own contribution never left it: take it exact, from `send`.
        let own_start: usize = counts[..me].iter().sum();
        out.clear();
        out.resize(mine, 0.0);
        for (src, part) in arrived
            .chunks_exact(mine.max(1))
            .enumerate()
            .take(self.size())
        {
            let part = if src == me {
                &send[own_start..own_start + mine]
            } else {
                part
            };
            if src == 0 {
                out.copy_from_slice(part);
            } else {
                out.iter_mut().zip(part).for_each(|(o, &v)| *o += v);
            }
        }
        wire.round(out);
        Ok(())
    }

    /// The AllGather that ends [`Comm::all_reduce_wire`]: every rank's `mine` (already
    /// rounded to `wire`, so exact on the wire) into its chunk of `buf`.
    pub(crate) fn all_gather_chunks_wire(
        &self,
        mine: &[f32],
        buf: &mut [f32],
        counts: &[usize],
        phase: Phase,
        wire: WirePrecision,
    ) -> Result<()> {
        let (mut out, mut back) = self.take_wire();
        wire.encode(mine, &mut out);
        back.clear();
        back.resize(buf.len(), 0u16);
        let gathered = self.all_gather_chunks(&out, &mut back, counts, "all_reduce", phase);
        if gathered.is_ok() {
            wire.decode_into(&back, buf);
        }
        self.put_wire((out, back));
        gathered
    }
}

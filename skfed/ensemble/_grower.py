"""Best-first tree growth on the server, from pooled node histograms, in few rounds.

:class:`TreeReplay` replays scikit-learn 1.9's ``TreeGrower`` (``grower.py``)
step for step: the root's sums from its histogram, a max-heap on gain
(``heapq``, children pushed left then right), ``max_leaf_nodes``,
``max_depth``, ``min_samples_leaf``, monotonic bounds passed to the children,
interaction constraints, the subtraction trick (the child with fewer rows, the
right one on a tie, is summed at the sites; its sibling is the parent minus
it), ``missing_go_to_left = n_left > n_right`` for a feature without missing
values, and the shrinkage of the leaves at the end.

A replay needs the histograms of the nodes it splits. Where one is not known
yet, the replay goes on without that subtree (its children count as leaves
for ``max_leaf_nodes`` but are not split) and lists the node to ask for. All
such nodes of all trees of an iteration are asked for in one round, and the
replay starts again from the root with what is known. Once a replay meets no
unknown histogram it *is* scikit-learn's run, so the tree is the same. Going
on, the replay splits the next nodes of the heap ahead of the real run, and
asks for their children in the same round, unless a node is likely not split
by the real run (its gain well below the awaited node's while the awaited
subtrees may fill the leaf budget: ``TreeReplay._likely_preempted``); such a
node is asked for in a later round if the real run does split it. A tree
costs about its depth plus one rounds (a few more where a node held back is
split after all; under ``max_depth`` nothing is held back, and a tree costs at
most ``max_depth + 1``), not one round per split, and few histograms that the
real run never reads. Random feature draws (``max_features < 1``) are replayed
from a copy of the generator taken when the iteration starts, trees in order, so
the draws happen in scikit-learn's order in the final replay. Without such draws a replay
reads no generator, so the next one resumes where this one first missed a
histogram (scikit-learn's run up to there is the same in every later replay): its
heap and leaves are copied there, and the heap's nodes that the steps past it
split or closed are reset.
"""

import copy
from heapq import heappop, heappush

import numpy as np

from ._splitting import MIN_HESSIAN_TO_SPLIT
from ._tree import NODE_DTYPE, TreePredictor

#: while histograms are awaited, a node on the heap is split ahead (its child asked for
#: in the same round) unless both: its gain is below this share of the gain of the
#: first node whose children are awaited, and the leaf budget would be spent if each
#: awaited child grew into ``_AWAITED_LEAVES`` leaves (only without a depth limit).
#: Measured (docs/boosting.md): 20-31% fewer histograms for 2-12% more rounds than
#: splitting every such node ahead
_AHEAD_GAIN = 0.7
_AWAITED_LEAVES = 3


class _Node:
    """A node of a tree being replayed."""

    def __init__(self, *, depth, key, n_samples, sum_gradients, sum_hessians, value):
        self.depth, self.key = depth, key
        self.n_samples, self.sum_gradients, self.sum_hessians = n_samples, sum_gradients, \
            sum_hessians
        self.value = value
        self.lower, self.upper = -np.inf, np.inf
        self.allowed, self.cst_indices = None, None
        self.split, self.is_leaf = None, False
        self.left = self.right = None

    def __lt__(self, other):  # heapq pops the highest gain first
        return self.split.gain > other.split.gain


def _copied(split):
    """A shallow copy of a :class:`SplitInfo` (the replay sets ``missing_go_to_left``
    on its node's copy; the cached one stays as found), without ``copy``'s protocol."""
    out = object.__new__(type(split))
    out.__dict__.update(split.__dict__)
    return out


def child_key(parent_key, split, has_missing, goes_left):
    """A node's identity: the splits that lead to it (they define its rows)."""
    bitset = None if split.left_cat_bitset is None else split.left_cat_bitset.tobytes()
    missing_left = bool(split.missing_go_to_left) and bool(has_missing)
    step = (int(split.feature_idx), int(split.bin_idx), missing_left,
            bool(split.is_categorical), bitset, bool(goes_left))
    return parent_key + (step,)


class TreeReplay:
    """The histograms known so far of one tree, and its replays.

    Parameters
    ----------
    splitter : Splitter
    n_samples : int
        Training rows.
    max_leaf_nodes, max_depth : int or None
    min_samples_leaf : int
    shrinkage : float
    interaction_cst : list of set or None
    hessian_one : numpy.float32 or None
        The constant hessian (1) when hessians are constant, else None.
    compiled : CompiledSplit or None
        scikit-learn's compiled split search with ``splitter``'s settings, run
        instead of the numpy scan where given (:mod:`._compiled_split`).
    """

    def __init__(self, splitter, *, n_samples, max_leaf_nodes, max_depth, min_samples_leaf,
                 shrinkage, interaction_cst, hessian_one, compiled=None):
        self.splitter, self.compiled = splitter, compiled
        self.n_samples = int(n_samples)
        self.max_leaf_nodes, self.max_depth = max_leaf_nodes, max_depth
        self.min_samples_leaf = int(min_samples_leaf)
        self.shrinkage = shrinkage
        self.interaction_cst = interaction_cst
        self.hessian_one = hessian_one
        self.histograms = {}
        self._splits = {}
        every = np.arange(len(splitter.is_categorical))
        mask = np.ones(len(every), dtype=bool)  # draw_features's mask when nothing is drawn
        self._every = (every, mask, mask.tobytes())
        # without feature draws a replay reads no generator: it may resume
        self._draws_nothing = splitter.feature_fraction >= 1.0
        self._resume = self._root = None

    def root_allowed(self):
        if self.interaction_cst is None:
            return None
        allowed = set().union(*self.interaction_cst)
        return np.fromiter(allowed, dtype=np.intp, count=len(allowed))

    # -- one replay ----------------------------------------------------------
    def replay(self, rng):
        """Grow the tree as far as the known histograms allow.

        Returns ``(root, leaves, asked)``: ``asked`` maps the keys of the nodes
        whose histograms are missing to the features they need (None: all);
        when it is empty, ``root`` is the finished tree (leaves not shrunk yet).
        """
        asked, resume, self._resume = {}, self._resume, None
        self._awaited_gain = None  # the gain of the first node whose children are asked for
        if resume is None:
            self._leaves, self._heap, self._pending = [], [], 0
            if () not in self.histograms:
                return None, [], {(): self.root_allowed()}
            root = self._root = self._make_root()
            self._leaves_and_push(root, rng)
        else:  # from where the last replay first missed a histogram
            root, heap, leaves, blocked = resume
            self._root = root
            self._leaves, self._heap, self._pending = list(leaves), list(heap), 0
            for node in heap:  # as they were then: the steps past it may have split them
                node.is_leaf, node.left, node.right = False, None, None
            self._children_splits(*blocked, rng, asked)
        while self._heap:
            if asked and self._likely_preempted(self._heap[0]):
                break  # asked for in a later round if the real run splits it
            node = heappop(self._heap)
            if self._split(node, rng, asked):
                break
        return root, self._leaves, asked

    def _likely_preempted(self, node):
        """Whether ``node``, next on the heap while children's histograms are awaited,
        is likely not split by the real run: the awaited subtrees may fill the leaf
        budget first. Splitting it ahead (asking for its child now) saves a round
        where the run does split it and wastes a histogram where it does not."""
        if self.max_leaf_nodes is None or self.max_depth is not None:
            # without a leaf budget every node of positive gain is split; under a depth
            # limit a tree keeps to at most max_depth + 1 rounds, which needs every
            # node split ahead (the rounds run at depth + 1 with no slack)
            return False
        weak = node.split.gain < _AHEAD_GAIN * self._awaited_gain
        planned = len(self._leaves) + len(self._heap) + _AWAITED_LEAVES * self._pending
        return weak and planned + 1 >= self.max_leaf_nodes

    def _make_root(self):
        allowed = self.root_allowed()
        first = 0 if allowed is None else allowed[0]
        grad, hess, _ = self.histograms[()]
        sum_gradients = grad[first].sum()
        if self.hessian_one is not None:
            sum_hessians = self.hessian_one * self.n_samples  # float32, as scikit-learn
        else:
            sum_hessians = hess[first].sum()
        root = _Node(depth=0, key=(), n_samples=self.n_samples,
                     sum_gradients=float(sum_gradients), sum_hessians=float(sum_hessians),
                     value=0.0)
        if self.interaction_cst is not None:
            root.allowed, root.cst_indices = allowed, range(len(self.interaction_cst))
        return root

    def _leaves_and_push(self, root, rng):
        if root.n_samples < 2 * self.min_samples_leaf or \
                root.sum_hessians < MIN_HESSIAN_TO_SPLIT:
            self._finalize(root)
            return
        self._find_split_and_push(root, rng)

    def _find_split_and_push(self, node, rng):
        if node.allowed is None and self.splitter.feature_fraction >= 1.0:
            # every feature, no draw: the same arrays at every node of the fit
            allowed, mask, drawn = self._every
        else:
            allowed = node.allowed if node.allowed is not None else self._every[0]
            mask = self.splitter.draw_features(len(allowed), rng)
            drawn = mask.tobytes()
        cache_key = (node.key, node.lower, node.upper, drawn)
        split = self._splits.get(cache_key)
        if split is None:
            args = (node.n_samples, self.histograms[node.key], node.sum_gradients,
                    node.sum_hessians, node.value, node.lower, node.upper, allowed)
            if self.compiled is not None:  # no draws: the mask keeps every feature
                split = self.compiled.find_node_split(*args)
            if split is None:
                split = self.splitter.find_node_split(*args, mask)
            self._splits[cache_key] = split
        node.split = _copied(split)
        if node.split.gain <= 0:
            self._finalize(node)
        else:
            heappush(self._heap, node)

    def _finalize(self, node):
        node.is_leaf = True
        self._leaves.append(node)

    def _split(self, node, rng, asked):
        """Split ``node`` (popped); True when the leaf budget ends the tree."""
        info, depth = node.split, node.depth + 1
        has_missing = self.splitter.has_missing_values[info.feature_idx]
        left = _Node(depth=depth, key=child_key(node.key, info, has_missing, True),
                     n_samples=info.n_samples_left, sum_gradients=info.sum_gradient_left,
                     sum_hessians=info.sum_hessian_left, value=info.value_left)
        right = _Node(depth=depth, key=child_key(node.key, info, has_missing, False),
                      n_samples=info.n_samples_right, sum_gradients=info.sum_gradient_right,
                      sum_hessians=info.sum_hessian_right, value=info.value_right)
        node.left, node.right = left, right
        n_leaves = len(self._leaves) + len(self._heap) + self._pending + 2
        if self.interaction_cst is not None:
            left.allowed, left.cst_indices = self._interactions(node)
            right.allowed, right.cst_indices = left.allowed, left.cst_indices
        if not has_missing:
            info.missing_go_to_left = left.n_samples > right.n_samples
        if self.max_leaf_nodes is not None and n_leaves == self.max_leaf_nodes:
            self._finalize(left)
            self._finalize(right)
            while self._heap:
                self._finalize(self._heap.pop())
            return True
        if self.max_depth is not None and depth == self.max_depth:
            self._finalize(left)
            self._finalize(right)
            return False
        for child in (left, right):
            if child.n_samples < 2 * self.min_samples_leaf:
                self._finalize(child)
        self._set_bounds(node, left, right)
        if not (left.is_leaf and right.is_leaf):
            self._children_splits(node, left, right, rng, asked)
        return False

    def _set_bounds(self, node, left, right):
        cst = self.splitter.monotonic_cst[node.split.feature_idx]
        if cst == 0:
            left.lower = right.lower = node.lower
            left.upper = right.upper = node.upper
            return
        mid = (left.value + right.value) / 2
        if cst == 1:
            left.lower, left.upper, right.lower, right.upper = node.lower, mid, mid, node.upper
        else:
            left.lower, left.upper, right.lower, right.upper = mid, node.upper, node.lower, mid

    def _children_splits(self, node, left, right, rng, asked):
        """The children's histograms (smaller summed at the sites, the larger by
        subtraction) and their splits; or, if unknown, a request for them."""
        small, large = (left, right) if left.n_samples < right.n_samples else (right, left)
        if small.key not in self.histograms:
            if self._resume is None and self._draws_nothing:
                # scikit-learn's run up to here needs no missing histogram: the next
                # replay starts here (the nodes' state kept, the heap and leaves copied)
                self._resume = (self._root, list(self._heap), list(self._leaves),
                                (node, left, right))
            asked[small.key] = small.allowed
            if self._awaited_gain is None:
                self._awaited_gain = node.split.gain
            self._pending += sum(not c.is_leaf for c in (left, right))
            return
        if large.key not in self.histograms:
            self.histograms[large.key] = tuple(
                None if p is None else p - s
                for p, s in zip(self.histograms[node.key], self.histograms[small.key]))
        for child in (left, right):
            if not child.is_leaf:
                self._find_split_and_push(child, rng)

    def _interactions(self, node):
        allowed, indices = set(), []
        for i in node.cst_indices:
            if node.split.feature_idx in self.interaction_cst[i]:
                indices.append(i)
                allowed.update(self.interaction_cst[i])
        return np.fromiter(allowed, dtype=np.intp, count=len(allowed)), indices

    # -- the finished tree ---------------------------------------------------
    def predictor(self, root, leaves, thresholds):
        """Shrink the leaves and lay the tree out as scikit-learn's node records."""
        for leaf in leaves:
            leaf.value *= self.shrinkage
        return make_predictor(root, thresholds, self.splitter.n_bins_non_missing)


def make_predictor(root, thresholds, n_bins_non_missing):
    """scikit-learn's ``make_predictor``: nodes in depth-first pre-order."""
    nodes = []
    stack = [root]
    while stack:  # pre-order: a node, then its left subtree, then its right one
        node = stack.pop()
        nodes.append(node)
        if not node.is_leaf:
            stack.extend((node.right, node.left))
    index = {id(node): i for i, node in enumerate(nodes)}
    records = np.zeros(len(nodes), dtype=NODE_DTYPE)
    n_categorical = sum(1 for n in nodes if not n.is_leaf and n.split.is_categorical)
    bitsets = np.zeros((n_categorical, 8), dtype=np.uint32)
    next_bitset = 0
    for i, node in enumerate(nodes):
        rec = records[i]
        rec["count"], rec["depth"], rec["value"] = node.n_samples, node.depth, node.value
        rec["gain"] = node.split.gain if node.split is not None else -1
        if node.is_leaf:
            rec["is_leaf"] = True
            continue
        info = node.split
        rec["feature_idx"], rec["bin_threshold"] = info.feature_idx, info.bin_idx
        rec["missing_go_to_left"], rec["is_categorical"] = info.missing_go_to_left, \
            info.is_categorical
        if info.bin_idx == n_bins_non_missing[info.feature_idx] - 1:
            rec["num_threshold"] = np.inf  # every non-missing value goes left
        elif info.is_categorical:
            rec["bitset_idx"] = next_bitset
            bitsets[next_bitset] = info.left_cat_bitset
            next_bitset += 1
        else:
            rec["num_threshold"] = thresholds[info.feature_idx][info.bin_idx]
        rec["left"], rec["right"] = index[id(node.left)], index[id(node.right)]
    return TreePredictor(records, bitsets, bitsets.copy())


def grow_iteration(replays, rng, fetch):
    """Grow the trees of one iteration together; returns ``(trees, rounds)``.

    ``fetch(requests)`` takes ``[(tree, key, allowed)]`` and returns their
    pooled histograms (one round); ``trees`` is ``[(root, leaves)]``, and ``rng``
    ends in the state scikit-learn's grower leaves it in.
    """
    start, rounds = copy.deepcopy(rng), 0
    draws = any(r.splitter.feature_fraction < 1.0 for r in replays)
    while True:
        gen = copy.deepcopy(start) if draws else rng  # without draws rng is not used
        results, requests = [], []
        for k, replay in enumerate(replays):
            root, leaves, asked = replay.replay(gen)
            results.append((root, leaves))
            requests += [(k, key, allowed) for key, allowed in asked.items()]
        if not requests:
            rng.bit_generator.state = gen.bit_generator.state
            return results, rounds
        for (k, key, _), hist in zip(requests, fetch(requests)):
            replays[k].histograms[key] = hist
        rounds += 1

"""``POST /feedback``: explicit outcome, implicit (a classified follow-up), or a Router-R1 reward.

Ownership is checked first; then the follow-up is classified or the Router-R1 reward computed; then
the selector logs the update (fsync) and applies it; a decision a served router made (mode
``router:<name>``) passes the feedback on to that router (``rlrouter.serving.router_models``), and only
then does the reply go out.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rlrouter.serving.auth import Principal
from rlrouter.serving.context import ServiceContext
from rlrouter.serving.errors import ApiError, public_text
from rlrouter.serving.router_models import RouterModels
from rlrouter.serving.schemas import FeedbackRequest, FeedbackResponse, PosteriorDelta


class FeedbackRole:
    def __init__(self, ctx: ServiceContext, classifier: Any = None, reward_fn: Any = None,
                 routers: RouterModels | None = None):
        """``classifier``/``reward_fn``: given by tests; None loads them on first use. ``routers``: the served
        routers, to which the feedback on their decisions goes on."""
        self.ctx = ctx
        self._classifier = classifier
        self._reward_fn = reward_fn
        self.routers = routers

    async def classifier(self) -> Any:
        if self._classifier is None:
            async with self.ctx._lock:
                if self._classifier is None:
                    from rlrouter.selector.implicit import ImplicitFeedbackClassifier

                    enc = self.ctx.encoder()
                    self._classifier = await asyncio.to_thread(
                        ImplicitFeedbackClassifier, enc.encode, None, self.ctx.serving.implicit_temperature)
        return self._classifier

    def reward_fn(self) -> Any:
        if self._reward_fn is None:
            from rlrouter.rewards.router_r1 import RouterR1Reward

            # the formula VSR documents, every term counted; training keeps Router-R1's code
            self._reward_fn = RouterR1Reward(alpha=self.ctx.cfg.cost_reward_alpha, candidates=self.ctx.candidates,
                                             formula="additive", format_penalty=self.ctx.cfg.format_reward_penalty)
        return self._reward_fn

    async def feedback(self, body: FeedbackRequest, principal: Principal) -> FeedbackResponse:
        ctx = self.ctx
        info = await ctx.selector.call("pending_info", request_id=body.request_id)
        if not principal.admin and info["user_id"] not in (None, principal.user_id):
            raise ApiError(403, f"field 'request_id': request '{body.request_id}' was routed for another user; "
                                "this API key may not give its feedback", "request_id")
        if info["answered"]:
            raise ApiError(409, f"field 'request_id': feedback for '{body.request_id}' was already recorded",
                           "request_id")
        kwargs: dict[str, Any] = {"request_id": body.request_id, "owner": principal.user_id,
                                  "admin": principal.admin, "winner": body.winner}
        label = confidence = reward = None
        if body.outcome is not None:
            kwargs["outcome"] = body.outcome
        elif body.followup_text is not None:
            ctx.check_query(body.followup_text, "followup_text")
            clf = await self.classifier()
            res = await asyncio.to_thread(clf.classify, body.followup_text)
            label, confidence = res.label, res.confidence
            kwargs.update(label=label, confidence=confidence)
        else:
            if not ctx.cfg.use_router_r1_rewards:
                raise ApiError(422, "field 'reward': Router-R1 reward feedback is off (use_router_r1_rewards: false)",
                               "router_r1" if body.router_r1 is not None else "reward")
            reward = body.reward if body.reward is not None else self._router_r1_reward(body)
            kwargs["reward"] = reward
        res = await ctx.selector.call("feedback", **kwargs)
        await ctx.log_feedback(body.request_id, principal.user_id, outcome=body.outcome, label=label,
                               confidence=confidence, reward=reward, winner=body.winner)
        router = None
        if self.routers is not None:
            try:
                router = await self.routers.feedback(info.get("mode"), body.request_id, kwargs)
            except Exception as e:  # noqa: BLE001 - the selector's update is durable already: report, not fail
                router = {"name": str(info.get("mode")), "learned": False,
                          "note": f"the served router did not get it: {public_text(f'{type(e).__name__}: {e}')}"}
        return FeedbackResponse(request_id=body.request_id, kind=res["kind"], durable=res["durable"],
                                applied=[PosteriorDelta(**d) for d in res["deltas"]], label=label,
                                confidence=confidence, reward=reward, router=router)

    def _router_r1_reward(self, body: FeedbackRequest) -> float:
        """Router-R1 reward of the trajectory: R = R_format + (1 - alpha) R_outcome + alpha R_cost, R_format the
        configured penalty when the format fails."""
        rr = body.router_r1
        assert rr is not None
        cfg = self.ctx.cfg
        cols: dict[str, Any] = {"ground_truth": [rr.ground_truth]}
        if cfg.cost_reward_alpha > 0:
            if rr.route_costs is None:
                raise ApiError(422, "field 'router_r1.route_costs': required when cost_reward_alpha > 0",
                               "router_r1.route_costs")
            cols["route_costs"] = [rr.route_costs]
        try:
            score = self.reward_fn().score([None], [rr.completion], **cols)[0]
        except (KeyError, ValueError, TypeError) as e:
            raise ApiError(422, f"field 'router_r1': {e}", "router_r1") from None
        return float(score.total)
